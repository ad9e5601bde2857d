/*
 * A C host with no Python in it, as an application embedding TFLite would be: loads the plugin
 * library given (dlopen, as TFLite's external-delegate loader does), creates a delegate with the
 * options given as KEY=VALUE, then destroys it. Prints "created" and exits 0, or prints the
 * plugin's reported error and exits 2; exits 1 when the library cannot be loaded.
 *
 *   c_host LIBRARY [KEY=VALUE ...]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *(*create_fn)(const char *const *, const char *const *, size_t, void (*)(const char *));
typedef void (*destroy_fn)(void *);

static void report(const char *message) { printf("reported: %s\n", message); }

int main(int argc, char **argv) {
    if (argc < 2) return 1;
    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        printf("load failed: %s\n", dlerror());
        return 1;
    }
    create_fn create = (create_fn)dlsym(library, "tflite_plugin_create_delegate");
    destroy_fn destroy = (destroy_fn)dlsym(library, "tflite_plugin_destroy_delegate");
    if (!create || !destroy) return 1;
    size_t count = (size_t)(argc - 2);
    const char **keys = calloc(count + 1, sizeof *keys);
    const char **values = calloc(count + 1, sizeof *values);
    char **copies = calloc(count + 1, sizeof *copies);
    if (!keys || !values || !copies) return 1;
    for (size_t i = 0; i < count; i++) {
        copies[i] = strdup(argv[i + 2]);
        char *equals = copies[i] ? strchr(copies[i], '=') : NULL;
        if (!equals) return 1;
        *equals = '\0';
        keys[i] = copies[i];
        values[i] = equals + 1;
    }
    void *delegate = create(keys, values, count, report);
    int status = 2;
    if (delegate) {
        printf("created\n");
        destroy(delegate);
        status = 0;
    }
    for (size_t i = 0; i < count; i++) free(copies[i]);
    free(copies);
    free(keys);
    free(values);
    return status;
}
