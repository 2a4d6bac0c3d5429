"""A low-rank matrix kept as its two factors (TransformerLens's FactoredMatrix, in NumPy).

`model.QK(layer, head)` is W_Q · W_Kᵀ and `model.OV(layer, head)` is W_V · W_O, each [d_model, d_model]
of rank ≤ d_head: stored as A [d_model, d_head] and B [d_head, d_model], and analysed without forming
the d_model × d_model product (the SVD from the two factors' SVDs, the nonzero eigenvalues from B·A).
"""

import numpy as _np


class FactoredMatrix:
    """M = A @ B, kept as A [..., ldim, mdim] and B [..., mdim, rdim].

    Everything derived (AB, svd, eigenvalues, norm) is computed in float64 from the factors as given."""

    def __init__(self, A, B):
        """A [ldim, mdim] and B [mdim, rdim] (or stacks with the same leading axes)."""
        A, B = _np.asarray(A), _np.asarray(B)
        if A.ndim < 2 or B.ndim < 2 or A.shape[-1] != B.shape[-2]:
            from . import _usage
            raise _usage("FactoredMatrix: A %s and B %s do not multiply" % (A.shape, B.shape))
        self.A, self.B = A, B

    def __repr__(self):
        """Shape and inner dimension."""
        return "<qkv.FactoredMatrix %s = %s @ %s>" % (self.shape, self.A.shape, self.B.shape)

    @property
    def shape(self):
        """The shape of A @ B."""
        return _np.broadcast_shapes(self.A.shape[:-2], self.B.shape[:-2]) + (self.A.shape[-2], self.B.shape[-1])

    @property
    def ldim(self):
        """Rows of the product (A's rows)."""
        return self.A.shape[-2]

    @property
    def rdim(self):
        """Columns of the product (B's columns)."""
        return self.B.shape[-1]

    @property
    def mdim(self):
        """The inner dimension (the rank bound, d_head for QK and OV)."""
        return self.A.shape[-1]

    @property
    def AB(self):
        """The product A @ B, float64."""
        return self.A.astype(_np.float64) @ self.B.astype(_np.float64)

    @property
    def BA(self):
        """The small product B @ A [mdim, mdim], float64 (needs ldim == rdim)."""
        return self.B.astype(_np.float64) @ self.A.astype(_np.float64)

    @property
    def T(self):
        """The transpose, Bᵀ @ Aᵀ, still factored."""
        return FactoredMatrix(_np.swapaxes(self.B, -1, -2), _np.swapaxes(self.A, -1, -2))

    def __matmul__(self, other):
        """(A @ B) @ other: a FactoredMatrix again (other is an array or a FactoredMatrix)."""
        if isinstance(other, FactoredMatrix):
            return FactoredMatrix(self.A, (self.B.astype(_np.float64) @ other.A) @ other.B)
        return FactoredMatrix(self.A, self.B.astype(_np.float64) @ _np.asarray(other, dtype=_np.float64))

    def __rmatmul__(self, other):
        """other @ (A @ B): a FactoredMatrix again."""
        return FactoredMatrix(_np.asarray(other, dtype=_np.float64) @ self.A, self.B)

    def svd(self):
        """(U, S, Vh) with A @ B = U @ diag(S) @ Vh (NumPy's convention; TransformerLens returns V, not Vh):
        U [ldim, mdim], S [mdim] descending, Vh [mdim, rdim], from the factors' SVDs (never forms A @ B)."""
        Ua, Sa, Vha = _np.linalg.svd(self.A.astype(_np.float64), full_matrices=False)
        Ub, Sb, Vhb = _np.linalg.svd(self.B.astype(_np.float64), full_matrices=False)
        middle = (Sa[..., :, None] * Vha) @ (Ub * Sb[..., None, :])
        Um, S, Vhm = _np.linalg.svd(middle, full_matrices=False)
        return Ua @ Um, S, Vhm @ Vhb

    @property
    def S(self):
        """The singular values, descending."""
        return self.svd()[1]

    @property
    def eigenvalues(self):
        """The nonzero eigenvalues of A @ B (those of B @ A [mdim, mdim], which has the same), complex."""
        return _np.linalg.eigvals(self.BA)

    def norm(self):
        """The Frobenius norm of A @ B (√Σ S²)."""
        return float(_np.sqrt(_np.sum(self.S ** 2)))
