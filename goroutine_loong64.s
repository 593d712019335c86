//go:build !rally_nogid

#include "textflag.h"

// func currentG() uintptr
TEXT ·currentG(SB),NOSPLIT,$0-8
	MOVV g, R4
	MOVV R4, ret+0(FP)
	RET
