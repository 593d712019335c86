//go:build !rally_nogid

#include "textflag.h"

// func currentG() uintptr
TEXT ·currentG(SB),NOSPLIT,$0-4
	MOVW g, R0
	MOVW R0, ret+0(FP)
	RET
