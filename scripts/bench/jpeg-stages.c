// The stages of cleaning a phone photo, timed apart in one process with libvips as nutrition calls
// it (one thread, no operation cache): what docs/BENCHMARKS.md's analysis section weighs when it
// says what a change to the pipeline would save. Prints each stage's median over ROUNDS rounds.
//
//   cc -O2 scripts/bench/jpeg-stages.c -o /tmp/jpeg-stages $(pkg-config --cflags --libs vips)
//   /tmp/jpeg-stages PHOTO.jpg [ROUNDS]       (scripts/bench/analysis makes such a photo)
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <vips/vips.h>

enum { DECODE_HALF, DECODE_QUARTER, KEPT_OWN_TABLES, KEPT_STANDARD_TABLES, MODEL_BY_DECODING, MODEL_BY_RESIZING, MODEL_BY_LINEAR_RESIZING, STAGES };
static const char *names[STAGES] = {
    "decode at half size",
    "decode at a quarter",
    "write the kept JPEG, its own Huffman tables",
    "write the kept JPEG, standard tables",
    "model copy: decode the kept JPEG at half size, write it",
    "model copy: resize the decoded pixels (lanczos3), write them",
    "model copy: resize the decoded pixels (linear), write them",
};

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fail(const char *what) {
    fprintf(stderr, "%s: %s\n", what, vips_error_buffer());
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PHOTO.jpg [ROUNDS]\n", argv[0]);
        return 2;
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 9;
    if (rounds < 1 || rounds > 1000) rounds = 9;
    if (VIPS_INIT(argv[0])) fail("libvips");
    vips_cache_set_max(0);
    vips_concurrency_set(1);
    gchar *photo;
    gsize length;
    GError *error = NULL;
    if (!g_file_get_contents(argv[1], &photo, &length, &error)) {
        fprintf(stderr, "%s\n", error->message);
        return 1;
    }

    double *times = calloc((size_t)STAGES * rounds, sizeof *times);
    size_t sizes[STAGES] = {0};
    for (int round = 0; round < rounds; round++) {
        double t = now_ms();
        VipsImage *loaded, *half, *quarter, *small, *resized;
        if (vips_jpegload_buffer(photo, length, &loaded, "shrink", 2, NULL)) fail("decode");
        if (!(half = vips_image_copy_memory(loaded))) fail("decode");
        g_object_unref(loaded);
        times[DECODE_HALF * rounds + round] = now_ms() - t;

        t = now_ms();
        if (vips_jpegload_buffer(photo, length, &loaded, "shrink", 4, NULL)) fail("decode");
        if (!(quarter = vips_image_copy_memory(loaded))) fail("decode");
        g_object_unref(loaded);
        times[DECODE_QUARTER * rounds + round] = now_ms() - t;

        void *kept, *plain, *model;
        size_t kept_length, plain_length, model_length;
        t = now_ms();
        if (vips_jpegsave_buffer(half, &kept, &kept_length, "strip", TRUE, "Q", 90, "optimize_coding", TRUE, NULL)) fail("write");
        times[KEPT_OWN_TABLES * rounds + round] = now_ms() - t;
        sizes[KEPT_OWN_TABLES] = kept_length;

        t = now_ms();
        if (vips_jpegsave_buffer(half, &plain, &plain_length, "strip", TRUE, "Q", 90, NULL)) fail("write");
        times[KEPT_STANDARD_TABLES * rounds + round] = now_ms() - t;
        sizes[KEPT_STANDARD_TABLES] = plain_length;

        t = now_ms();
        if (vips_jpegload_buffer(kept, kept_length, &small, "shrink", 2, NULL)) fail("decode");
        if (vips_jpegsave_buffer(small, &model, &model_length, "strip", TRUE, "Q", 90, NULL)) fail("write");
        times[MODEL_BY_DECODING * rounds + round] = now_ms() - t;
        sizes[MODEL_BY_DECODING] = model_length;
        g_free(model);

        t = now_ms();
        int long_side = vips_image_get_width(half) > vips_image_get_height(half) ? vips_image_get_width(half) : vips_image_get_height(half);
        if (vips_resize(half, &resized, 1024.0 / long_side, NULL)) fail("resize");
        if (vips_jpegsave_buffer(resized, &model, &model_length, "strip", TRUE, "Q", 90, NULL)) fail("write");
        times[MODEL_BY_RESIZING * rounds + round] = now_ms() - t;
        sizes[MODEL_BY_RESIZING] = model_length;
        g_free(model);

        VipsImage *linear;
        t = now_ms();
        if (vips_resize(half, &linear, 1024.0 / long_side, "kernel", VIPS_KERNEL_LINEAR, NULL)) fail("resize");
        if (vips_jpegsave_buffer(linear, &model, &model_length, "strip", TRUE, "Q", 90, NULL)) fail("write");
        times[MODEL_BY_LINEAR_RESIZING * rounds + round] = now_ms() - t;
        sizes[MODEL_BY_LINEAR_RESIZING] = model_length;
        g_free(model);
        g_object_unref(linear);

        g_free(kept);
        g_free(plain);
        g_object_unref(small);
        g_object_unref(resized);
        g_object_unref(half);
        g_object_unref(quarter);
    }
    for (int stage = 0; stage < STAGES; stage++) {
        qsort(times + stage * rounds, rounds, sizeof *times, compare);
        printf("%-62s %7.1f ms", names[stage], times[stage * rounds + rounds / 2]);
        if (sizes[stage]) printf("  (%zu bytes)", sizes[stage]);
        printf("\n");
    }
    free(times);
    g_free(photo);
    return 0;
}
