/* Unit tests for egress/: the address checks that keep fetch() off private networks. */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "egress.h"

/* An address as a sockaddr (IPv4 or IPv6 by syntax). */
static struct sockaddr_storage addr(const char *text) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  struct sockaddr_in *in = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
  if (inet_pton(AF_INET, text, &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
  } else {
    if (inet_pton(AF_INET6, text, &in6->sin6_addr) != 1) fail_msg("bad test address %s", text);
    in6->sin6_family = AF_INET6;
  }
  return ss;
}

static void refused(const char *text, const char *why) {
  struct sockaddr_storage ss = addr(text);
  const char *got = egress_addr_refusal((struct sockaddr *)&ss);
  if (got == NULL) fail_msg("%s was allowed, expected %s", text, why);
  if (strcmp(got, why) != 0) fail_msg("%s: got %s, expected %s", text, got, why);
}

static void allowed(const char *text) {
  struct sockaddr_storage ss = addr(text);
  const char *got = egress_addr_refusal((struct sockaddr *)&ss);
  if (got != NULL) fail_msg("%s was refused (%s)", text, got);
}

static void test_ipv4_ranges(void **state) {
  (void)state;
  refused("127.0.0.1", "loopback");
  refused("127.255.255.254", "loopback");
  refused("10.1.2.3", "private");
  refused("172.16.0.1", "private");
  refused("172.31.255.255", "private");
  refused("192.168.1.1", "private");
  refused("169.254.169.254", "link-local");
  refused("100.64.0.1", "CGNAT");
  refused("100.127.255.255", "CGNAT");
  refused("224.0.0.1", "multicast");
  refused("239.255.255.250", "multicast");
  refused("0.0.0.0", "unspecified");
  refused("0.1.2.3", "unspecified");
  refused("255.255.255.255", "reserved");
  refused("240.0.0.1", "reserved");
  refused("192.0.2.5", "reserved");
  allowed("8.8.8.8");
  allowed("1.1.1.1");
  allowed("172.15.255.255");
  allowed("172.32.0.0");
  allowed("100.63.255.255");
  allowed("100.128.0.0");
  allowed("169.253.255.255");
  allowed("11.0.0.1");
  allowed("192.169.0.1");
}

static void test_ipv6_ranges(void **state) {
  (void)state;
  refused("::1", "loopback");
  refused("::", "unspecified");
  refused("fe80::1", "link-local");
  refused("febf::1", "link-local");
  refused("fc00::1", "private");
  refused("fd12:3456::1", "private");
  refused("fec0::1", "private");
  refused("ff02::1", "multicast");
  refused("2001:db8::1", "reserved");
  refused("2001::1", "reserved");
  refused("100::1", "reserved");
  refused("::2", "reserved");
  /* IPv4 inside IPv6 is judged as IPv4 */
  refused("::ffff:127.0.0.1", "loopback");
  refused("::ffff:169.254.169.254", "link-local");
  refused("::ffff:10.0.0.1", "private");
  refused("::127.0.0.1", "loopback");
  refused("64:ff9b::a9fe:a9fe", "link-local");
  refused("64:ff9b:1::c0a8:101", "private");
  refused("2002:7f00:1::", "loopback");
  refused("2002:a00:1::1", "private");
  allowed("::ffff:8.8.8.8");
  allowed("64:ff9b::808:808");
  allowed("2002:808:808::1");
  allowed("2606:4700:4700::1111");
  allowed("2a00:1450:4001::200e");
}

static void test_cidr_parse(void **state) {
  (void)state;
  egress_cidr c;
  assert_int_equal(egress_cidr_parse("127.0.0.1/32", &c), 0);
  assert_int_equal(c.family, AF_INET);
  assert_int_equal(c.prefix, 32);
  assert_int_equal(egress_cidr_parse("10.0.0.0/8", &c), 0);
  assert_int_equal(egress_cidr_parse("0.0.0.0/0", &c), 0);
  assert_int_equal(egress_cidr_parse("::1/128", &c), 0);
  assert_int_equal(c.family, AF_INET6);
  assert_int_equal(egress_cidr_parse("fd00::/8", &c), 0);
  assert_int_equal(egress_cidr_parse("192.168.1.7", &c), 0);
  assert_int_equal(c.prefix, 32);
  assert_int_equal(egress_cidr_parse("10.0.0.1/8", &c), -1); /* host bits set */
  assert_int_equal(egress_cidr_parse("10.0.0.0/33", &c), -1);
  assert_int_equal(egress_cidr_parse("10.0.0.0/", &c), -1);
  assert_int_equal(egress_cidr_parse("10.0.0.0/08", &c), -1);
  assert_int_equal(egress_cidr_parse("10.0.0.0/8x", &c), -1);
  assert_int_equal(egress_cidr_parse("::/129", &c), -1);
  assert_int_equal(egress_cidr_parse("localhost/32", &c), -1);
  assert_int_equal(egress_cidr_parse("", &c), -1);
  assert_int_equal(egress_cidr_parse("/8", &c), -1);
}

static void test_allow_list(void **state) {
  (void)state;
  egress_cidr allow[2];
  assert_int_equal(egress_cidr_parse("127.0.0.1/32", &allow[0]), 0);
  assert_int_equal(egress_cidr_parse("fd00::/16", &allow[1]), 0);
  struct sockaddr_storage a;
  a = addr("127.0.0.1");
  assert_null(egress_addr_check((struct sockaddr *)&a, allow, 2));
  a = addr("::ffff:127.0.0.1"); /* mapped form of an allowed IPv4 address */
  assert_null(egress_addr_check((struct sockaddr *)&a, allow, 2));
  a = addr("127.0.0.2");
  assert_string_equal(egress_addr_check((struct sockaddr *)&a, allow, 2), "loopback");
  a = addr("::1");
  assert_string_equal(egress_addr_check((struct sockaddr *)&a, allow, 2), "loopback");
  a = addr("fd00:1::1");
  assert_null(egress_addr_check((struct sockaddr *)&a, allow, 2));
  a = addr("fd01::1");
  assert_string_equal(egress_addr_check((struct sockaddr *)&a, allow, 2), "private");
  a = addr("169.254.169.254");
  assert_string_equal(egress_addr_check((struct sockaddr *)&a, allow, 2), "link-local");
  a = addr("8.8.8.8");
  assert_null(egress_addr_check((struct sockaddr *)&a, NULL, 0));
  egress_cidr odd;
  assert_int_equal(egress_cidr_parse("172.16.0.0/12", &odd), 0);
  a = addr("172.20.1.1");
  assert_true(egress_cidr_contains(&odd, (struct sockaddr *)&a));
  a = addr("172.32.1.1");
  assert_false(egress_cidr_contains(&odd, (struct sockaddr *)&a));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ipv4_ranges),
      cmocka_unit_test(test_ipv6_ranges),
      cmocka_unit_test(test_cidr_parse),
      cmocka_unit_test(test_allow_list),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
