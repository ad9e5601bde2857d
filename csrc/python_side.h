/*
 * Brings up the plugin's Python half when a host loaded the library without importing the package
 * (a hard-coded path, TensorFlow's interpreter, another environment's Python): in a process whose
 * Python is running, the package that holds this library is imported before any callback runs.
 */
#ifndef DLG_PYTHON_SIDE_H
#define DLG_PYTHON_SIDE_H

#include <stddef.h>

/* 0 when the Python half is ready; else -1 with a message in `error`. Thread-safe; the work is
   done once per process (later calls read one atomic flag). */
int dlg_python_side_ready(char *error, size_t error_size);

#endif
