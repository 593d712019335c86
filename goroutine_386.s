//go:build !rally_nogid

#include "textflag.h"

// func currentG() uintptr
TEXT ·currentG(SB),NOSPLIT,$0-4
	MOVL (TLS), AX
	MOVL AX, ret+0(FP)
	RET
