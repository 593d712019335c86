//go:build amd64 && !purego

#include "textflag.h"

// UTF-8 validation with AVX2, after Keiser and Lemire, "Validating UTF-8 In
// Less Than One Instruction Per Byte" (2021), the "lookup" algorithm: each
// byte is classified together with the byte before it by three 16-entry
// tables indexed by nibbles (VPSHUFB); a bit that survives the AND of the
// three names an error class. Two more checks cover what one byte of context
// cannot: a third or fourth byte that must be a continuation (from the bytes
// two and three back), and a text that ends inside a character.
//
// Error classes, one bit each, in the tables below:
//   0x01 too short: a lead byte not followed by a continuation
//   0x02 too long: a continuation after ASCII
//   0x04 overlong 3-byte form: E0 80-9F
//   0x08 too large: F4 90-BF, F5-FF then 90-BF
//   0x10 surrogate: ED A0-BF
//   0x20 overlong 2-byte form: C0-C1 then a continuation
//   0x40 overlong 4-byte form F0 80-8F, or too large F5-FF then 80-8F
//   0x80 two continuations in a row (right only as byte 3 or 4)

// Indexed by the high nibble of the previous byte.
DATA prev1High<>+0(SB)/8, $0x0202020202020202
DATA prev1High<>+8(SB)/8, $0x4915012180808080
GLOBL prev1High<>(SB), RODATA|NOPTR, $16

// Indexed by the low nibble of the previous byte.
DATA prev1Low<>+0(SB)/8, $0xcbcbcb8b8383a3e7
DATA prev1Low<>+8(SB)/8, $0xcbcbdbcbcbcbcbcb
GLOBL prev1Low<>(SB), RODATA|NOPTR, $16

// Indexed by the high nibble of the byte itself.
DATA curHigh<>+0(SB)/8, $0x0101010101010101
DATA curHigh<>+8(SB)/8, $0x01010101babaaee6
GLOBL curHigh<>(SB), RODATA|NOPTR, $16

// A block whose byte i is above maxTail[i] ends inside a character: the last
// byte is a lead byte (>= C0), the one before a 3- or 4-byte lead (>= E0),
// the one before that a 4-byte lead (>= F0).
DATA maxTail<>+0(SB)/8, $0xffffffffffffffff
DATA maxTail<>+8(SB)/8, $0xffffffffffffffff
DATA maxTail<>+16(SB)/8, $0xffffffffffffffff
DATA maxTail<>+24(SB)/8, $0xbfdfefffffffffff
GLOBL maxTail<>(SB), RODATA|NOPTR, $32

DATA nibble<>+0(SB)/1, $0x0f
GLOBL nibble<>(SB), RODATA|NOPTR, $1
DATA third<>+0(SB)/1, $0x60
GLOBL third<>(SB), RODATA|NOPTR, $1
DATA fourth<>+0(SB)/1, $0x70
GLOBL fourth<>(SB), RODATA|NOPTR, $1
DATA high<>+0(SB)/1, $0x80
GLOBL high<>(SB), RODATA|NOPTR, $1

// Registers kept across the loops:
//   Y15 0x0f in every byte    Y14 prev1High   Y13 prev1Low   Y12 curHigh
//   Y11 the previous block    Y10 errors      Y9 incomplete   Y8 maxTail
//   Y7 0x60    Y6 0x70    Y5 0x80
// Y0 and Y1 hold input blocks; Y2-Y4 are scratch.
#define SETUP \
	VPBROADCASTB nibble<>(SB), Y15; \
	VBROADCASTI128 prev1High<>(SB), Y14; \
	VBROADCASTI128 prev1Low<>(SB), Y13; \
	VBROADCASTI128 curHigh<>(SB), Y12; \
	VPXOR Y11, Y11, Y11; \
	VPXOR Y10, Y10, Y10; \
	VPXOR Y9, Y9, Y9; \
	VMOVDQU maxTail<>(SB), Y8; \
	VPBROADCASTB third<>(SB), Y7; \
	VPBROADCASTB fourth<>(SB), Y6; \
	VPBROADCASTB high<>(SB), Y5

// CHECK ORs into Y10 the errors of block IN that follows block PREV. Y2
// first holds PREV's high lane and IN's low lane, from which VPALIGNR takes
// the bytes one, two and three back. A byte two back >= E0 or three back
// >= F0 leaves 0x80 after the saturating subtraction: there a continuation
// must be, which is what the "two continuations" class flags; XOR cancels
// the two.
#define CHECK(IN, PREV) \
	VPERM2I128 $0x21, IN, PREV, Y2; \
	VPALIGNR $14, Y2, IN, Y3; \
	VPALIGNR $13, Y2, IN, Y4; \
	VPSUBUSB Y7, Y3, Y3; \
	VPSUBUSB Y6, Y4, Y4; \
	VPOR Y3, Y4, Y4; \
	VPAND Y5, Y4, Y4; \
	VPALIGNR $15, Y2, IN, Y2; \
	VPSRLW $4, Y2, Y3; \
	VPAND Y15, Y3, Y3; \
	VPSHUFB Y3, Y14, Y3; \
	VPAND Y15, Y2, Y2; \
	VPSHUFB Y2, Y13, Y2; \
	VPAND Y2, Y3, Y3; \
	VPSRLW $4, IN, Y2; \
	VPAND Y15, Y2, Y2; \
	VPSHUFB Y2, Y12, Y2; \
	VPAND Y2, Y3, Y3; \
	VPXOR Y4, Y3, Y3; \
	VPOR Y3, Y10, Y10

// RESULT leaves in AX 1 if any error was seen, else 2 if the text ends
// inside a character, else 0.
#define RESULT \
	XORQ AX, AX; \
	MOVQ $1, BX; \
	MOVQ $2, DX; \
	VPTEST Y9, Y9; \
	CMOVQNE DX, AX; \
	VPTEST Y10, Y10; \
	CMOVQNE BX, AX; \
	VZEROUPPER

// func lookupAVX2(p []byte) int
// len(p) >= 64; p starts at a character boundary.
TEXT ·lookupAVX2(SB), NOSPLIT, $0-32
	MOVQ p_base+0(FP), SI
	MOVQ p_len+8(FP), CX
	LEAQ (SI)(CX*1), DI // the end
	SETUP

loop64:
	CMPQ CX, $64
	JB   tail32
	VMOVDQU   (SI), Y0
	VMOVDQU   32(SI), Y1
	VPOR      Y0, Y1, Y2
	VPMOVMSKB Y2, AX
	TESTL     AX, AX
	JNZ       text64

	// ASCII: only a character left open by the block before can be wrong.
	VPOR    Y9, Y10, Y10
	VPXOR   Y9, Y9, Y9
	VMOVDQA Y1, Y11
	ADDQ    $64, SI
	SUBQ    $64, CX
	JMP     loop64

text64:
	CHECK(Y0, Y11)
	CHECK(Y1, Y0)
	VPSUBUSB Y8, Y1, Y9
	VMOVDQA  Y1, Y11
	ADDQ     $64, SI
	SUBQ     $64, CX
	JMP      loop64

tail32:
	CMPQ CX, $32
	JB   tail
	VMOVDQU (SI), Y0
	CHECK(Y0, Y11)
	VPSUBUSB Y8, Y0, Y9
	VMOVDQA  Y0, Y11
	ADDQ     $32, SI
	SUBQ     $32, CX

tail:
	TESTQ CX, CX
	JZ    end

	// The last 32 bytes after the 32 before them, overlapping bytes
	// already checked: checking those again finds nothing new.
	VMOVDQU -32(DI), Y0
	VMOVDQU -64(DI), Y11
	CHECK(Y0, Y11)
	VPSUBUSB Y8, Y0, Y9

end:
	RESULT
	MOVQ AX, ret+24(FP)
	RET

// func unmaskLookupAVX2(p []byte, key uint64) int
// As lookupAVX2, but first XORs each whole 32-byte block of p in place with
// key (its 8 bytes repeated); the caller has already unmasked the last
// len(p)%32 bytes, which the final overlapping block reads.
TEXT ·unmaskLookupAVX2(SB), NOSPLIT, $0-40
	MOVQ p_base+0(FP), SI
	MOVQ p_len+8(FP), CX
	LEAQ (SI)(CX*1), DI
	SETUP

uloop64:
	CMPQ CX, $64
	JB   utail32
	VPBROADCASTQ key+24(FP), Y2
	VPXOR        (SI), Y2, Y0
	VPXOR        32(SI), Y2, Y1
	VMOVDQU      Y0, (SI)
	VMOVDQU      Y1, 32(SI)
	VPOR         Y0, Y1, Y2
	VPMOVMSKB    Y2, AX
	TESTL        AX, AX
	JNZ          utext64
	VPOR         Y9, Y10, Y10
	VPXOR        Y9, Y9, Y9
	VMOVDQA      Y1, Y11
	ADDQ         $64, SI
	SUBQ         $64, CX
	JMP          uloop64

utext64:
	CHECK(Y0, Y11)
	CHECK(Y1, Y0)
	VPSUBUSB Y8, Y1, Y9
	VMOVDQA  Y1, Y11
	ADDQ     $64, SI
	SUBQ     $64, CX
	JMP      uloop64

utail32:
	CMPQ CX, $32
	JB   utail
	VPBROADCASTQ key+24(FP), Y2
	VPXOR        (SI), Y2, Y0
	VMOVDQU      Y0, (SI)
	CHECK(Y0, Y11)
	VPSUBUSB Y8, Y0, Y9
	VMOVDQA  Y0, Y11
	ADDQ     $32, SI
	SUBQ     $32, CX

utail:
	TESTQ CX, CX
	JZ    uend
	VMOVDQU -32(DI), Y0
	VMOVDQU -64(DI), Y11
	CHECK(Y0, Y11)
	VPSUBUSB Y8, Y0, Y9

uend:
	RESULT
	MOVQ AX, ret+32(FP)
	RET

// The same algorithm with 16-byte SSE registers, for amd64 machines without
// AVX2 (SSSE3 for PSHUFB and PALIGNR, SSE4.1 for PTEST). The loops keep the
// shape of the AVX2 ones, a "block" of 32 bytes being two registers, so that
// the unmasking variant has the same contract: whole 32-byte blocks are
// unmasked here, the caller unmasks the rest.

DATA nibble16<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nibble16<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL nibble16<>(SB), RODATA|NOPTR, $16
DATA third16<>+0(SB)/8, $0x6060606060606060
DATA third16<>+8(SB)/8, $0x6060606060606060
GLOBL third16<>(SB), RODATA|NOPTR, $16
DATA fourth16<>+0(SB)/8, $0x7070707070707070
DATA fourth16<>+8(SB)/8, $0x7070707070707070
GLOBL fourth16<>(SB), RODATA|NOPTR, $16
DATA high16<>+0(SB)/8, $0x8080808080808080
DATA high16<>+8(SB)/8, $0x8080808080808080
GLOBL high16<>(SB), RODATA|NOPTR, $16

// Registers kept across the loops, as in SETUP but 16 bytes wide:
//   X15 0x0f   X14 prev1High   X13 prev1Low   X12 curHigh
//   X11 the previous 16 bytes  X10 errors      X9 incomplete
//   X8 the last 16 bytes of maxTail            X7 0x60   X6 0x70   X5 0x80
// X0 holds the block being checked; X1-X4 are scratch.
#define SETUP_SSE \
	MOVOU nibble16<>(SB), X15; \
	MOVOU prev1High<>(SB), X14; \
	MOVOU prev1Low<>(SB), X13; \
	MOVOU curHigh<>(SB), X12; \
	PXOR  X11, X11; \
	PXOR  X10, X10; \
	PXOR  X9, X9; \
	MOVOU maxTail<>+16(SB), X8; \
	MOVOU third16<>(SB), X7; \
	MOVOU fourth16<>(SB), X6; \
	MOVOU high16<>(SB), X5

// CHECK_SSE ORs into X10 the errors of the 16 bytes in X0, which follow the
// 16 bytes in X11, and then moves X0 to X11. PALIGNR takes the bytes one, two
// and three back from X11:X0; the rest is CHECK's.
#define CHECK_SSE \
	MOVO    X0, X2; \
	PALIGNR $14, X11, X2; \
	MOVO    X0, X3; \
	PALIGNR $13, X11, X3; \
	PSUBUSB X7, X2; \
	PSUBUSB X6, X3; \
	POR     X2, X3; \
	PAND    X5, X3; \
	MOVO    X0, X1; \
	PALIGNR $15, X11, X1; \
	MOVO    X1, X2; \
	PSRLW   $4, X2; \
	PAND    X15, X2; \
	MOVO    X14, X4; \
	PSHUFB  X2, X4; \
	PAND    X15, X1; \
	MOVO    X13, X2; \
	PSHUFB  X1, X2; \
	PAND    X2, X4; \
	MOVO    X0, X1; \
	PSRLW   $4, X1; \
	PAND    X15, X1; \
	MOVO    X12, X2; \
	PSHUFB  X1, X2; \
	PAND    X2, X4; \
	PXOR    X3, X4; \
	POR     X4, X10; \
	MOVO    X0, X11

// CHECK_AT checks the 16 bytes at OFF(SI).
#define CHECK_AT(OFF) \
	MOVOU OFF(SI), X0; \
	CHECK_SSE

// INCOMPLETE_SSE sets X9 from the last block checked (now in X11).
#define INCOMPLETE_SSE \
	MOVO    X11, X9; \
	PSUBUSB X8, X9

#define RESULT_SSE \
	XORQ    AX, AX; \
	MOVQ    $1, BX; \
	MOVQ    $2, DX; \
	PTEST   X9, X9; \
	CMOVQNE DX, AX; \
	PTEST   X10, X10; \
	CMOVQNE BX, AX

// func lookupSSE(p []byte) int
// As lookupAVX2.
TEXT ·lookupSSE(SB), NOSPLIT, $0-32
	MOVQ p_base+0(FP), SI
	MOVQ p_len+8(FP), CX
	LEAQ (SI)(CX*1), DI
	SETUP_SSE

sloop64:
	CMPQ     CX, $64
	JB       stail32
	MOVOU    (SI), X0
	MOVOU    16(SI), X1
	MOVOU    32(SI), X2
	MOVOU    48(SI), X3
	POR      X0, X1
	POR      X2, X1
	POR      X3, X1
	PMOVMSKB X1, AX
	TESTL    AX, AX
	JNZ      stext64

	// ASCII: only a character left open by the block before can be wrong.
	POR  X9, X10
	PXOR X9, X9
	MOVO X3, X11
	ADDQ $64, SI
	SUBQ $64, CX
	JMP  sloop64

stext64:
	CHECK_AT(0)
	CHECK_AT(16)
	CHECK_AT(32)
	CHECK_AT(48)
	INCOMPLETE_SSE
	ADDQ $64, SI
	SUBQ $64, CX
	JMP  sloop64

stail32:
	CMPQ CX, $32
	JB   stail
	CHECK_AT(0)
	CHECK_AT(16)
	INCOMPLETE_SSE
	ADDQ $32, SI
	SUBQ $32, CX

stail:
	TESTQ CX, CX
	JZ    send

	// The last 32 bytes after the 16 before them, overlapping bytes
	// already checked: checking those again finds nothing new.
	MOVOU -48(DI), X11
	LEAQ  -32(DI), SI
	CHECK_AT(0)
	CHECK_AT(16)
	INCOMPLETE_SSE

send:
	RESULT_SSE
	MOVQ AX, ret+24(FP)
	RET

// UNMASK_SSE XORs the 16 bytes at OFF(SI) with X4 in place, leaving them in R.
#define UNMASK_SSE(OFF, R) \
	MOVOU OFF(SI), R; \
	PXOR  X4, R; \
	MOVOU R, OFF(SI)

// func unmaskLookupSSE(p []byte, key uint64) int
// As unmaskLookupAVX2.
TEXT ·unmaskLookupSSE(SB), NOSPLIT, $0-40
	MOVQ p_base+0(FP), SI
	MOVQ p_len+8(FP), CX
	LEAQ (SI)(CX*1), DI
	SETUP_SSE

suloop64:
	CMPQ       CX, $64
	JB         sutail32
	MOVQ       key+24(FP), X4
	PUNPCKLQDQ X4, X4
	UNMASK_SSE(0, X0)
	UNMASK_SSE(16, X1)
	UNMASK_SSE(32, X2)
	UNMASK_SSE(48, X3)
	POR        X0, X1
	POR        X2, X1
	MOVO       X3, X0
	POR        X3, X1
	PMOVMSKB   X1, AX
	TESTL      AX, AX
	JNZ        sutext64
	POR        X9, X10
	PXOR       X9, X9
	MOVO       X0, X11
	ADDQ       $64, SI
	SUBQ       $64, CX
	JMP        suloop64

sutext64:
	CHECK_AT(0)
	CHECK_AT(16)
	CHECK_AT(32)
	CHECK_AT(48)
	INCOMPLETE_SSE
	ADDQ $64, SI
	SUBQ $64, CX
	JMP  suloop64

sutail32:
	CMPQ       CX, $32
	JB         sutail
	MOVQ       key+24(FP), X4
	PUNPCKLQDQ X4, X4
	UNMASK_SSE(0, X0)
	UNMASK_SSE(16, X1)
	CHECK_AT(0)
	CHECK_AT(16)
	INCOMPLETE_SSE
	ADDQ $32, SI
	SUBQ $32, CX

sutail:
	TESTQ CX, CX
	JZ    suend
	MOVOU -48(DI), X11
	LEAQ  -32(DI), SI
	CHECK_AT(0)
	CHECK_AT(16)
	INCOMPLETE_SSE

suend:
	RESULT_SSE
	MOVQ AX, ret+32(FP)
	RET
