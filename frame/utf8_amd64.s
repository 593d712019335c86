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
