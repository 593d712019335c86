//go:build (mips || mipsle) && !rally_nogid

#include "textflag.h"

// func currentG() uintptr
TEXT ·currentG(SB),NOSPLIT,$0-4
	MOVW g, R1
	MOVW R1, ret+0(FP)
	RET
