//go:build (ppc64 || ppc64le) && !rally_nogid

#include "textflag.h"

// func currentG() uintptr
TEXT ·currentG(SB),NOSPLIT,$0-8
	MOVD g, R3
	MOVD R3, ret+0(FP)
	RET
