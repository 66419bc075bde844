# Turns a file into a C source defining `const unsigned char SYMBOL[]` (with a
# trailing NUL) and `const size_t SYMBOL_len` (without it).
# Usage: cmake -DIN=file -DOUT=file.c -DSYMBOL=name -P embed.cmake
file(READ ${IN} hex HEX)
file(SIZE ${IN} size)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n  " bytes "${bytes}")
file(WRITE ${OUT}
  "/* Generated from ${IN} by node/embed.cmake; do not edit. */\n"
  "#include <stddef.h>\n"
  "const unsigned char ${SYMBOL}[] = {\n  ${bytes}0x00};\n"
  "const size_t ${SYMBOL}_len = ${size};\n")
