// Reductions of the canonical lane orders (package doc), shared by the
// assembly files that #include this one.

// REDUCE8Y folds the 8 lanes of Y (X its low half) into lane 0 of X:
// j += j+4, j+2, j+1.
#define REDUCE8Y(Y, X, TX) \
	VEXTRACTF128 $1, Y, TX \
	VADDPS TX, X, X \
	VMOVHLPS X, X, TX \
	VADDPS TX, X, X \
	VMOVSHDUP X, TX \
	VADDSS TX, X, X

// REDUCE16Z folds the 16 lanes of Z (Y and X its low halves) into lane 0
// of X by the fixed tree j += j+8, then REDUCE8Y's; TY, TX scratch.
#define REDUCE16Z(Z, Y, X, TY, TX) \
	VEXTRACTF64X4 $1, Z, TY \
	VADDPS TY, Y, Y \
	REDUCE8Y(Y, X, TX)
