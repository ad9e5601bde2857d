/*
 * Checked reads of this process's memory, for inspecting a driver's objects without trusting
 * their layout, and a lasting copy of a name to give one (delegate/runtime/platforms/pocl_cpu.py
 * repairs PoCL's CPU name with them).
 *
 * Also the cffi cdef (preprocessor lines stripped).
 */
#ifndef DLG_POCL_REPAIR_H
#define DLG_POCL_REPAIR_H

#include <stddef.h>
#include <stdint.h>

/* Copy `size` bytes (at most 4096) at `address` of this process into `out` without trusting the
 * address: they go through the pipe (write_fd, read_fd, empty) with the write system call, which
 * fails with EFAULT where nothing is mapped, where a load would crash. The raw system call, not
 * libc's write, which AddressSanitizer intercepts and would check. Returns 0, or -1 when some
 * byte is unreadable. */
int dlg_read_checked(int write_fd, int read_fd, uintptr_t address, void *out, size_t size);

/* A copy of the `size` bytes at `name` with a terminator after them, from malloc, for a driver's
 * object to hold in place of a shorter string of its own: never freed here, as the driver may
 * free it when it releases the object (malloc's block is one it can free). NULL when `size` is 0
 * or over 64, or when memory is short. */
char *dlg_name_copy(const char *name, size_t size);

#endif
