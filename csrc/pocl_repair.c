/* Checked reads of this process's memory. See pocl_repair.h. */
#define _GNU_SOURCE /* syscall */
#include "pocl_repair.h"

#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

int dlg_read_checked(int write_fd, int read_fd, uintptr_t address, void *out, size_t size) {
    if (size == 0 || size > 4096 || out == NULL)
        return -1;
    long written = syscall(SYS_write, write_fd, (const void *)address, size);
    if (written <= 0)
        return -1;
    size_t got = 0;
    while (got < (size_t)written) { /* drain what went in, so the pipe is empty for the next call */
        ssize_t n = read(read_fd, (char *)out + got, (size_t)written - got);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return (size_t)written == size ? 0 : -1;
}

char *dlg_name_copy(const char *name, size_t size) {
    if (name == NULL || size == 0 || size > 64)
        return NULL;
    char *copy = malloc(size + 1);
    if (copy == NULL)
        return NULL;
    memcpy(copy, name, size);
    copy[size] = '\0';
    return copy;
}
