//go:build (mips64 || mips64le) && !rally_nogid

#include "textflag.h"

// func currentG() uintptr
TEXT ·currentG(SB),NOSPLIT,$0-8
	MOVV g, R1
	MOVV R1, ret+0(FP)
	RET
