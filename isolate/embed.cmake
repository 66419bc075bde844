# Joins runtime/*.js (file-name order) into the one classic script the shim
# evaluates, and writes it as a C++ byte array.
#   cmake -DRUNTIME_DIR=<dir> -DOUTPUT=<file.cc> -P embed.cmake
# Everything stays hex until the end so that no byte of the sources is ever
# seen by CMake's list or escape handling.
file(GLOB files ${RUNTIME_DIR}/*.js)
list(SORT files)

string(HEX "(function (native) {\n'use strict';\n" head)
string(HEX "\n" newline)
string(HEX "\n})" tail)
set(hex "${head}")
foreach(f ${files})
  file(READ ${f} body HEX)
  string(APPEND hex "${body}${newline}")
endforeach()
string(APPEND hex "${tail}")

string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")

file(WRITE ${OUTPUT}.tmp
  "// Generated from isolate/runtime/*.js by embed.cmake. Do not edit.\n"
  "#include <stddef.h>\n"
  "extern const unsigned char iso_runtime_js[];\n"
  "extern const size_t iso_runtime_js_len;\n"
  "const unsigned char iso_runtime_js[] = {\n${bytes}0x00};\n"
  "const size_t iso_runtime_js_len = sizeof(iso_runtime_js) - 1;\n")
file(COPY_FILE ${OUTPUT}.tmp ${OUTPUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUTPUT}.tmp)
