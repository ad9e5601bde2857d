/* See python_side.h. Uses only CPython's stable ABI, as the module is built for abi3. */
#define _GNU_SOURCE
#define Py_LIMITED_API 0x03080000
#include <Python.h>

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "python_side.h"

#ifndef DLG_BUILD_SITES
#define DLG_BUILD_SITES ""
#endif
#ifndef DLG_BUILD_PYTHON
#define DLG_BUILD_PYTHON ""
#endif

/* Once the package is imported it stays imported for the process's life: the flag caches a fact
   of the process, not state of a delegate. */
static atomic_bool python_side_up;

/* Python's message for the exception being raised ("Type: text"), cleared; GIL held. */
static void take_python_error(char *error, size_t error_size, const char *what) {
    PyObject *type = NULL, *value = NULL, *trace = NULL;
    PyErr_Fetch(&type, &value, &trace);
    const char *text = NULL;
    PyObject *shown = value ? PyObject_Str(value) : NULL;
    PyObject *utf8 = shown ? PyUnicode_AsUTF8String(shown) : NULL;
    if (utf8) text = PyBytes_AsString(utf8);
    if (!text) PyErr_Clear();
    snprintf(error, error_size, "tflite-opencl-delegate: %s: %s", what, text ? text : "(no message)");
    Py_XDECREF(utf8);
    Py_XDECREF(shown);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(trace);
}

/* runpy.run_path(<package>/_plugin_bootstrap.py) with the library's path and the build's facts. */
static int run_bootstrap(const char *library, char *error, size_t error_size) {
    char script[4096];
    const char *slash = strrchr(library, '/');
    if (!slash || (size_t)(slash - library) + sizeof "/_plugin_bootstrap.py" > sizeof script) {
        snprintf(error, error_size, "tflite-opencl-delegate: cannot place the library path %s", library);
        return -1;
    }
    snprintf(script, sizeof script, "%.*s/_plugin_bootstrap.py", (int)(slash - library), library);
    int status = -1;
    PyObject *runpy = PyImport_ImportModule("runpy");
    PyObject *given = Py_BuildValue("{s:s,s:s,s:s}", "library", library, "build_sites", DLG_BUILD_SITES,
                                    "build_python", DLG_BUILD_PYTHON);
    PyObject *done = runpy && given ? PyObject_CallMethod(runpy, "run_path", "sO", script, given) : NULL;
    if (done)
        status = 0;
    else
        take_python_error(error, error_size, "bringing up the Python side of the plugin failed");
    Py_XDECREF(done);
    Py_XDECREF(given);
    Py_XDECREF(runpy);
    return status;
}

int dlg_python_side_ready(char *error, size_t error_size) {
    if (atomic_load_explicit(&python_side_up, memory_order_acquire)) return 0;
    if (!Py_IsInitialized()) {
        snprintf(error, error_size,
                 "tflite-opencl-delegate: no Python is running in this process; C and C++ hosts load the "
                 "plugin from delegate.c_plugin_path(), which starts one");
        return -1;
    }
    Dl_info info;
    char library[4096];
    /* dladdr names the file as it was loaded, perhaps relative to the working folder then */
    if (!dladdr((void *)dlg_python_side_ready, &info) || !info.dli_fname || !realpath(info.dli_fname, library)) {
        snprintf(error, error_size, "tflite-opencl-delegate: cannot find the plugin library's own path");
        return -1;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    int status = run_bootstrap(library, error, error_size);
    PyGILState_Release(gil);
    if (status == 0) atomic_store_explicit(&python_side_up, true, memory_order_release);
    return status;
}
