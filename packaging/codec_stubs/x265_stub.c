/* A stand-in for libx265 (GPL) in the desktop bundle: same soname and entry point as the
 * copy inside PyAV's wheel, but no encoder. FFmpeg asks it for the x265 API table and, on
 * NULL, reports that the HEVC encoder is not available. Apache-2.0 like the app.
 *
 * The build script checks that this file defines every x265 symbol libavcodec needs. */

#include <stddef.h>

/* The entry point carries x265's ABI number (x265_api_get_216): the build script passes the
 * number libavcodec asks for as -DX265_BUILD=N. */
#ifndef X265_BUILD
#error "compile with -DX265_BUILD=<number from libavcodec's x265_api_get_N>"
#endif
#define PASTE2(a, b) a##b
#define PASTE(a, b) PASTE2(a, b)
#define x265_api_get PASTE(x265_api_get_, X265_BUILD)

const void *x265_api_get(int bit_depth) { (void)bit_depth; return NULL; }
