/*
 * A stand-in for Windows' bcryptprimitives.dll, for running baton's Windows
 * tests under wine 8 (Debian 12), which lacks that DLL. Rust's std (>= 1.78)
 * imports ProcessPrng from it for its random numbers (HashMap seeds): without
 * the DLL every Rust .exe fails to load (status c0000135, exit code 53, no
 * output). Wine >= 9 ships the DLL; scripts/test-windows installs this stub
 * into its private wine prefix only when wine has none. Never shipped.
 *
 * ProcessPrng fills the buffer from RtlGenRandom (advapi32's
 * SystemFunction036), which takes at most a ULONG per call.
 */
#include <windows.h>
#define SystemFunction036 NTAPI SystemFunction036
#include <ntsecapi.h>
#undef SystemFunction036

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len) {
        ULONG n = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!RtlGenRandom(data, n))
            return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
