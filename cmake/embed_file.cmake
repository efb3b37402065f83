# cmake -DINPUT=FILE -DOUTPUT=FILE.cc -DSYMBOL=NAME -P embed_file.cmake
# Writes OUTPUT defining `extern "C" const char NAME[]`: the bytes of INPUT, NUL-terminated.
file(READ "${INPUT}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${INPUT} by cmake/embed_file.cmake; do not edit.\n"
  "extern \"C\" const char ${SYMBOL}[] = {\n  ${bytes}'\\0'};\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
