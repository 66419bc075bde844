/* being written */
typedef int egress_placeholder_conn;
