/*
 * isolate: the wire format of host calls (iso_wire_*), without V8.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "isolate.h"

static void expect_next(iso_wire_reader *r, uint8_t type, iso_wire_value *v) {
  assert_int_equal(iso_wire_next(r, v), 1);
  assert_int_equal(v->type, type);
}

static void test_scalars(void **state) {
  (void)state;
  iso_wire w;
  iso_wire_init(&w);
  iso_wire_undefined(&w);
  iso_wire_null(&w);
  iso_wire_bool(&w, 0);
  iso_wire_bool(&w, 7);
  iso_wire_number(&w, -1.5);
  iso_wire_number(&w, INFINITY);
  iso_wire_number(&w, NAN);
  iso_wire_bigint(&w, INT64_MIN);
  iso_wire_bigint(&w, INT64_MAX);
  iso_wire_string(&w, "h\xc3\xa9", 3);
  iso_wire_string(&w, "", 0);
  iso_wire_bytes(&w, "\0\1\2", 3);
  iso_wire_bytes(&w, NULL, 0);
  /* Little-endian on the wire, whatever the machine. */
  static const uint8_t head[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0, 0, 0, 0, 0, 0, 0xf8, 0xbf};
  assert_memory_equal(w.data, head, sizeof(head));

  iso_wire_reader r;
  iso_wire_value v;
  iso_wire_reader_init(&r, w.data, w.len);
  expect_next(&r, ISO_WIRE_UNDEFINED, &v);
  expect_next(&r, ISO_WIRE_NULL, &v);
  expect_next(&r, ISO_WIRE_FALSE, &v);
  expect_next(&r, ISO_WIRE_TRUE, &v);
  expect_next(&r, ISO_WIRE_NUMBER, &v);
  assert_true(v.number == -1.5);
  expect_next(&r, ISO_WIRE_NUMBER, &v);
  assert_true(isinf(v.number) && v.number > 0);
  expect_next(&r, ISO_WIRE_NUMBER, &v);
  assert_true(isnan(v.number));
  expect_next(&r, ISO_WIRE_BIGINT, &v);
  assert_true(v.bigint == INT64_MIN);
  expect_next(&r, ISO_WIRE_BIGINT, &v);
  assert_true(v.bigint == INT64_MAX);
  expect_next(&r, ISO_WIRE_STRING, &v);
  assert_int_equal(v.len, 3);
  assert_memory_equal(v.ptr, "h\xc3\xa9", 3);
  expect_next(&r, ISO_WIRE_STRING, &v);
  assert_int_equal(v.len, 0);
  expect_next(&r, ISO_WIRE_BYTES, &v);
  assert_int_equal(v.len, 3);
  assert_memory_equal(v.ptr, "\0\1\2", 3);
  expect_next(&r, ISO_WIRE_BYTES, &v);
  assert_int_equal(v.len, 0);
  assert_int_equal(iso_wire_next(&r, &v), 0);
  assert_int_equal(iso_wire_next(&r, &v), 0);
  iso_wire_free(&w);
  assert_null(w.data);
  assert_int_equal(w.len, 0);
}

static void test_containers(void **state) {
  (void)state;
  /* {"a": [1, {"b": null}], "c": "d"} */
  iso_wire w;
  iso_wire_init(&w);
  iso_wire_object(&w, 2);
  iso_wire_string(&w, "a", 1);
  iso_wire_array(&w, 2);
  iso_wire_number(&w, 1);
  iso_wire_object(&w, 1);
  iso_wire_string(&w, "b", 1);
  iso_wire_null(&w);
  iso_wire_string(&w, "c", 1);
  iso_wire_string(&w, "d", 1);

  iso_wire_reader r;
  iso_wire_value v;
  iso_wire_reader_init(&r, w.data, w.len);
  expect_next(&r, ISO_WIRE_OBJECT, &v);
  assert_int_equal(v.count, 2);
  expect_next(&r, ISO_WIRE_STRING, &v);
  expect_next(&r, ISO_WIRE_ARRAY, &v);
  assert_int_equal(v.count, 2);
  expect_next(&r, ISO_WIRE_NUMBER, &v);
  expect_next(&r, ISO_WIRE_OBJECT, &v);
  assert_int_equal(v.count, 1);
  expect_next(&r, ISO_WIRE_STRING, &v);
  expect_next(&r, ISO_WIRE_NULL, &v);
  expect_next(&r, ISO_WIRE_STRING, &v);
  expect_next(&r, ISO_WIRE_STRING, &v);
  assert_memory_equal(v.ptr, "d", 1);
  assert_int_equal(iso_wire_next(&r, &v), 0);

  /* Large values grow the buffer. */
  iso_wire_free(&w);
  static char big[100000];
  memset(big, 'x', sizeof(big));
  iso_wire_array(&w, 3);
  for (int i = 0; i < 3; i++)
    iso_wire_string(&w, big, sizeof(big));
  assert_int_equal(w.len, 5 + 3 * (5 + sizeof(big)));
  iso_wire_reader_init(&r, w.data, w.len);
  expect_next(&r, ISO_WIRE_ARRAY, &v);
  for (int i = 0; i < 3; i++) {
    expect_next(&r, ISO_WIRE_STRING, &v);
    assert_int_equal(v.len, sizeof(big));
  }
  assert_int_equal(iso_wire_next(&r, &v), 0);
  iso_wire_free(&w);
}

static int read_all(const uint8_t *data, size_t len) {
  iso_wire_reader r;
  iso_wire_value v;
  int rc;
  iso_wire_reader_init(&r, data, len);
  while ((rc = iso_wire_next(&r, &v)) == 1)
    ;
  return rc;
}

static void test_malformed(void **state) {
  (void)state;
  static const struct {
    const char *what;
    uint8_t bytes[16];
    size_t len;
  } cases[] = {
      {"unknown tag", {0x0a}, 1},
      {"unknown tag 0xff", {0xff}, 1},
      {"short number", {0x04, 1, 2, 3}, 4},
      {"short bigint", {0x05, 1, 2, 3, 4, 5, 6, 7}, 8},
      {"short length", {0x06, 1, 0}, 3},
      {"string past the end", {0x06, 4, 0, 0, 0, 'a', 'b', 'c'}, 8},
      {"bytes past the end", {0x07, 0xff, 0xff, 0xff, 0xff, 1}, 6},
      {"count past the end", {0x08, 3, 0, 0, 0, 0x00, 0x00}, 7},
      {"object count past the end", {0x09, 2, 0, 0, 0, 0x00, 0x00, 0x00}, 8},
      {"huge count", {0x08, 0xff, 0xff, 0xff, 0xff}, 5},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    if (read_all(cases[i].bytes, cases[i].len) != -1)
      fail_msg("accepted: %s", cases[i].what);
  }
  /* A truncated value is an error; the reader is flat, so a cut between
   * the values of an array is the caller's to notice (it counts). */
  iso_wire w;
  iso_wire_init(&w);
  iso_wire_array(&w, 2);
  iso_wire_string(&w, "hello", 5);
  iso_wire_number(&w, 2);
  for (size_t n = 1; n < w.len; n++)
    assert_int_equal(read_all(w.data, n), n == 15 ? 0 : -1);
  assert_int_equal(read_all(w.data, w.len), 0);
  assert_int_equal(read_all(NULL, 0), 0);
  iso_wire_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scalars),
      cmocka_unit_test(test_containers),
      cmocka_unit_test(test_malformed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
