/*
 * Replays inputs through a libFuzzer target without libFuzzer (any C compiler):
 * each file is read into an exactly-sized heap buffer, so a sanitizer build
 * catches any read past its end.
 *
 *   replay FILE...
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f || fseek(f, 0, SEEK_END) != 0) {
            fprintf(stderr, "replay: cannot read %s\n", argv[i]);
            return 2;
        }
        long n = ftell(f);
        if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
            fprintf(stderr, "replay: cannot size %s\n", argv[i]);
            return 2;
        }
        uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
        if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
            fprintf(stderr, "replay: cannot load %s\n", argv[i]);
            return 2;
        }
        fclose(f);
        LLVMFuzzerTestOneInput(buf, (size_t)n);
        free(buf);
    }
    printf("replayed %d inputs\n", argc - 1);
    return 0;
}
