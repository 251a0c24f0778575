/* The two headers a remap plugin needs; everything else is reached through them. */
#include <ts/ts.h>
#include <ts/remap.h>
