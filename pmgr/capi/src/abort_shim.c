/* Variadic front of pmgr_abort: format the message, hand it to the Rust side. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int pmgr_abort_msg(int code, const char *msg);

int pmgr_abort(int code, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    int n;

    if (fmt == NULL) {
        return pmgr_abort_msg(code, NULL);
    }
    va_start(ap, fmt);
    n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0) {
        text[0] = '\0';
    } else if ((size_t) n >= sizeof text) {
        /* cut: mark it */
        text[sizeof text - 2] = '+';
        text[sizeof text - 1] = '\0';
    }
    return pmgr_abort_msg(code, text);
}
