/*
 * The external-delegate plugin for hosts without Python (a C or C++ program): the same two entry
 * points as the package's native module, which it loads and forwards to after making sure a Python
 * is running in the process. It links no Python itself, so any host can load it:
 *   - a process whose Python is running (a Python host): forwards at once;
 *   - no Python: loads the libpython the package was built with (or $DELEGATE_LIBPYTHON),
 *     starts it with the build's Python home (unless $PYTHONHOME is set), releases its lock for
 *     other threads, then forwards. Python then stays up until the process ends.
 * Anything that stops it becomes a message through report_error (and stderr), and NULL: never a
 * crash. The build's facts come from delegate/_build_c_host.py as macros.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <wchar.h>

#include "tflite_abi.h"

#ifndef DLG_LIBPYTHON
#define DLG_LIBPYTHON ""
#endif
#ifndef DLG_PYTHON_HOME
#define DLG_PYTHON_HOME ""
#endif
#ifndef DLG_PYTHON_STDLIB
#define DLG_PYTHON_STDLIB ""
#endif

#define NAME "tflite-opencl-delegate"

typedef TfLiteDelegate *(*create_fn)(const char *const *, const char *const *, size_t, void (*)(const char *));
typedef void (*destroy_fn)(TfLiteDelegate *);

/* Where the plugin's code lives, found once per process (pthread_once): a fact of the process,
   read-only once found. */
typedef struct plugin_entry {
    create_fn create;
    destroy_fn destroy;
    char error[1536];
} plugin_entry;

static pthread_once_t found_once = PTHREAD_ONCE_INIT;
static plugin_entry entry;

typedef int (*int_void_fn)(void);
typedef void (*void_int_fn)(int);
typedef void *(*ptr_void_fn)(void);
typedef wchar_t *(*decode_fn)(const char *, size_t *);
typedef void (*set_home_fn)(const wchar_t *);

static int fail(const char *format, const char *detail) {
    if (snprintf(entry.error, sizeof entry.error, format, detail ? detail : "") >= (int)sizeof entry.error)
        entry.error[sizeof entry.error - 2] = '.'; /* a very long path, cut: still a message */
    return -1;
}

/* A Python running in this process, started here when there is none. 0, or -1 with entry.error. */
static int python_running(void) {
    void *scope = RTLD_DEFAULT;
    int_void_fn is_initialized = (int_void_fn)dlsym(scope, "Py_IsInitialized");
    if (!is_initialized) {
        const char *libpython = getenv("DELEGATE_LIBPYTHON");
        if (!libpython || !*libpython) libpython = DLG_LIBPYTHON;
        if (!*libpython)
            return fail(NAME ": no Python in this process, and the package was built by a Python without a shared "
                             "libpython%s; set DELEGATE_LIBPYTHON to one of the same version, or load the plugin "
                             "from a Python host",
                        "");
        scope = dlopen(libpython, RTLD_NOW | RTLD_GLOBAL); /* the native module resolves Python's symbols here */
        if (!scope) return fail(NAME ": no Python in this process, and loading its library failed: %s", dlerror());
        is_initialized = (int_void_fn)dlsym(scope, "Py_IsInitialized");
        if (!is_initialized) return fail(NAME ": %s is not a Python library (no Py_IsInitialized)", libpython);
    }
    if (is_initialized()) return 0;
    void_int_fn initialize = (void_int_fn)dlsym(scope, "Py_InitializeEx");
    ptr_void_fn save_thread = (ptr_void_fn)dlsym(scope, "PyEval_SaveThread");
    decode_fn decode = (decode_fn)dlsym(scope, "Py_DecodeLocale");
    set_home_fn set_home = (set_home_fn)dlsym(scope, "Py_SetPythonHome");
    if (!initialize || !save_thread || !decode) return fail(NAME ": the Python library lacks Py_InitializeEx%s", "");
    const char *home = getenv("PYTHONHOME");
    if (!home || !*home) {
        /* Python aborts the process when it cannot find its standard library: check first */
        struct stat seen;
        char os_py[PATH_MAX];
        int cut = snprintf(os_py, sizeof os_py, "%s/os.py", DLG_PYTHON_STDLIB) >= (int)sizeof os_py;
        if (!*DLG_PYTHON_STDLIB || cut || stat(os_py, &seen) != 0)
            return fail(NAME ": the standard library of the Python the package was built with is gone (%s); set "
                             "PYTHONHOME",
                        DLG_PYTHON_STDLIB);
        if (set_home && *DLG_PYTHON_HOME) {
            wchar_t *wide = decode(DLG_PYTHON_HOME, NULL); /* Python keeps the pointer: never freed */
            if (wide) set_home(wide);
        }
    }
    initialize(0); /* 0: the host keeps its own signal handlers */
    if (!is_initialized()) return fail(NAME ": starting Python failed%s", "");
    save_thread(); /* release the lock: every call (any thread) takes it through PyGILState_Ensure */
    return 0;
}

/* The package's native module beside this library, loaded, and its two entry points. */
static int native_module(void) {
    Dl_info info;
    char self[PATH_MAX], pattern[PATH_MAX + 32];
    if (!dladdr((void *)native_module, &info) || !info.dli_fname || !realpath(info.dli_fname, self))
        return fail(NAME ": cannot find this library's own path%s", "");
    char *slash = strrchr(self, '/');
    if (!slash) return fail(NAME ": cannot find this library's own folder%s", "");
    *slash = '\0';
    if (snprintf(pattern, sizeof pattern, "%s/_native*.so", self) >= (int)sizeof pattern)
        return fail(NAME ": this library's folder path is too long%s", "");
    glob_t found;
    if (glob(pattern, 0, NULL, &found) != 0 || found.gl_pathc == 0) {
        globfree(&found);
        return fail(NAME ": the package's native module (_native*.so) is not beside this library in %s", self);
    }
    void *native = dlopen(found.gl_pathv[0], RTLD_NOW | RTLD_LOCAL);
    globfree(&found);
    if (!native) return fail(NAME ": loading the package's native module failed: %s", dlerror());
    entry.create = (create_fn)dlsym(native, "tflite_plugin_create_delegate");
    entry.destroy = (destroy_fn)dlsym(native, "tflite_plugin_destroy_delegate");
    if (!entry.create || !entry.destroy) return fail(NAME ": the native module lacks the plugin's entry points%s", "");
    return 0;
}

static void find_plugin(void) {
    if (python_running() != 0 || native_module() != 0) {
        entry.create = NULL;
        entry.destroy = NULL;
    }
}

TfLiteDelegate *tflite_plugin_create_delegate(const char *const *options_keys, const char *const *options_values,
                                              size_t num_options, void (*report_error)(const char *)) {
    pthread_once(&found_once, find_plugin);
    if (!entry.create) {
        if (report_error) report_error(entry.error);
        fprintf(stderr, "%s\n", entry.error); /* a host may pass no report_error: the reason must show */
        return NULL;
    }
    return entry.create(options_keys, options_values, num_options, report_error);
}

void tflite_plugin_destroy_delegate(TfLiteDelegate *delegate) {
    pthread_once(&found_once, find_plugin);
    if (delegate && entry.destroy) entry.destroy(delegate);
}
