//go:build !rally_nogid

#include "textflag.h"

// func currentG() uintptr
TEXT ·currentG(SB),NOSPLIT,$0-8
	MOV g, X10
	MOV X10, ret+0(FP)
	RET
