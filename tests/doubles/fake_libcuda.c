/* A stand-in for libcuda.so.1 for the tests of ocihook doctor's CUDA probe: the driver API
 * functions the probe calls, on host memory ("device" pointers are malloc'ed), with the same
 * C signatures; cuLaunchKernel runs the probe's "inc" kernel (add 1 to n words). With
 * FAKE_CUDA_CORRUPT set, cuMemcpyDtoH flips one word, so a probe that checks nothing would
 * still pass. Built by the tests with the machine's cc when it has one. */
#include <stdlib.h>
#include <string.h>
typedef unsigned long long P;
int cuInit(unsigned f) { return f; }
int cuDriverGetVersion(int *v) { *v = 12040; return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return 0; }
int cuDeviceGetName(char *s, int len, int d) { strncpy(s, "Fake GPU", len); return 0; }
int cuDeviceGetUuid_v2(unsigned char *u, int d) { for (int i = 0; i < 16; i++) u[i] = i * 17; return 0; }
int cuCtxCreate_v2(void **c, unsigned f, int d) { *c = (void *)1; return 0; }
int cuMemAlloc_v2(P *p, size_t n) { *p = (P)malloc(n); return *p ? 0 : 2; }
int cuMemcpyHtoD_v2(P d, const void *h, size_t n) { memcpy((void *)d, h, n); return 0; }
int cuMemcpyDtoH_v2(void *h, P d, size_t n) {
  memcpy(h, (void *)d, n);
  if (getenv("FAKE_CUDA_CORRUPT")) ((unsigned *)h)[n / 8] ^= 1;
  return 0;
}
int cuModuleLoadData(void **m, const void *img) { *m = (void *)2; return strstr(img, ".entry inc") ? 0 : 218; }
int cuModuleGetFunction(void **f, void *m, const char *name) { *f = (void *)3; return strcmp(name, "inc") ? 500 : 0; }
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned sh, void *st, void **params, void **extra) {
  unsigned *p = (unsigned *)*(P *)params[0]; unsigned n = *(unsigned *)params[1];
  if ((unsigned long long)gx * bx < n) return 1;
  for (unsigned i = 0; i < n; i++) p[i] += 1;
  return 0;
}
int cuCtxSynchronize(void) { return 0; }
int cuMemFree_v2(P p) { free((void *)p); return 0; }
