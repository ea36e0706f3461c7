/* A stand-in for libx264 (GPL) in the desktop bundle: same soname and symbols as the copy
 * inside PyAV's wheel, but no encoder. FFmpeg's libx264 wrapper links against these names;
 * with this library every attempt to open the H.264 encoder fails cleanly ("Error setting
 * preset/tune", then no encoder), so the bundle carries no GPL code and records with VP9
 * (libvpx) or AV1 (SVT-AV1) instead. Written for this project; Apache-2.0 like the app.
 *
 * The build script checks that this file defines every x264 symbol libavcodec needs. */

#include <stddef.h>

/* x264 puts its ABI number into one symbol name (x264_encoder_open_165): the build script
 * passes the number libavcodec asks for as -DX264_BUILD=N. */
#ifndef X264_BUILD
#error "compile with -DX264_BUILD=<number from libavcodec's x264_encoder_open_N>"
#endif
#define PASTE2(a, b) a##b
#define PASTE(a, b) PASTE2(a, b)
#define x264_encoder_open PASTE(x264_encoder_open_, X264_BUILD)

typedef struct {
    unsigned char level_idc;
    int mbps, frame_size, dpb, bitrate, cpb, mv_range, mvs_per_2mb, slice_rate, mincr;
    int bipred8x8, direct8x8, frame_only;
} x264_level_t;

/* FFmpeg walks this table until level_idc == 0: an empty table. */
const x264_level_t x264_levels[] = {{0}};

static const int NO_ENCODER = -1;

void x264_param_default(void *param) { (void)param; }
int x264_param_default_preset(void *param, const char *preset, const char *tune)
{ (void)param; (void)preset; (void)tune; return NO_ENCODER; }
int x264_param_apply_profile(void *param, const char *profile)
{ (void)param; (void)profile; return NO_ENCODER; }
void x264_param_apply_fastfirstpass(void *param) { (void)param; }
int x264_param_parse(void *param, const char *name, const char *value)
{ (void)param; (void)name; (void)value; return NO_ENCODER; }
void x264_param_cleanup(void *param) { (void)param; }
void x264_picture_init(void *picture) { (void)picture; }

void *x264_encoder_open(void *param) { (void)param; return NULL; }
int x264_encoder_reconfig(void *encoder, void *param) { (void)encoder; (void)param; return NO_ENCODER; }
int x264_encoder_headers(void *encoder, void **nal, int *n_nal)
{ (void)encoder; (void)nal; if (n_nal) *n_nal = 0; return NO_ENCODER; }
int x264_encoder_encode(void *encoder, void **nal, int *n_nal, void *in, void *out)
{ (void)encoder; (void)nal; (void)in; (void)out; if (n_nal) *n_nal = 0; return NO_ENCODER; }
void x264_encoder_close(void *encoder) { (void)encoder; }
int x264_encoder_delayed_frames(void *encoder) { (void)encoder; return 0; }
int x264_encoder_maximum_delayed_frames(void *encoder) { (void)encoder; return 0; }
