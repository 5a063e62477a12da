/* drift.h: how far a device's value may be from the reference's because its inputs
 * already were, so that a comparison blames the node that made a difference and not
 * every node downstream of it.
 *
 * A node's drift is its relative difference from the reference, element by element
 * (rel_diff: |d - c| / max(|c|, |d|), at most 2). Where a node is stored, its drift is
 * observed; where it is not (a value a fused kernel keeps in registers), it is bounded
 * from its inputs' drift by the node's rule:
 *   - a comparison (LESS, EQUAL: max's ties): 0 where its inputs agree, else any (a
 *     difference however small may flip it);
 *   - other elementwise (and dropout), where the result is a half type and an input
 *     differs: one unit of rounding more, for the neighbouring value it may round to;
 *   - other elementwise (and dropout): at most 2x the sum of its inputs' at the element each
 *     input broadcasts to it (for a product or quotient the sum itself; the 2 covers a
 *     rounding on the way); for an addition or subtraction, as for a sum below;
 *   - a view (reshape) or broadcast: its input's at the element it copies;
 *   - a sum (SUM, MEAN, REDUCE_TO): an absolute difference of at most 2x the sum over
 *     the elements summed of their absolute differences, relative to the reference's
 *     sum, so a near-cancelling sum may turn small input differences into a large
 *     relative one (an element's absolute difference is its drift times the larger of
 *     its two values: the device's where it was stored, else at most |reference| / (1 -
 *     drift), and unbounded for a drift of 1 or more: a ReLU mask that flipped where the
 *     reference is 0);
 *   - a matrix product: likewise a sum, of |da| |b| + |a| |db| over its terms, with a
 *     tf32 unit of each operand read as tf32 (libraries round it in their own ways) and
 *     the sum's own rounding;
 *   - MAX: 2x the largest drift it reduces over;
 *   - UNFOLD, TRANSPOSE, PERMUTE and CAUSAL_MASK, copies: the drift of the element
 *     copied (0 outside the image, and where the mask writes its constant);
 *     FOLD: a sum per pixel, as above;
 *   - a sum's own rounding in f32: sqrt(n) units of roundoff of the sum of its n terms'
 *     magnitudes, which a near-cancelling sum (batch norm's gradients) shows;
 *   - CROSS_ENTROPY: the mean over rows of 2x the row's largest absolute difference (its
 *     log-sum-exp and the label's logit each move by at most that);
 *   - COUNT_CORRECT: the rows whose largest logit leads the next by at most 2x the row's
 *     largest absolute difference (a prediction that may change), over the count;
 *   - SOFTMAX: twice its input's absolute difference plus the row's largest (the
 *     log-sum-exp moves by at most that);
 *   - SOFTMAX_GRAD, y (d - sum(d y)): the sum bounded as a matrix product's, then the
 *     product and the difference (which cancels where d is near the sum);
 *   - EMBED_GRAD: a sum per table row over the positions whose index is that row;
 *   - anything else (log_softmax, a loss's gradient): no bound.
 * A stored node over the tolerance passes when every element's drift is within that
 * bound plus the tolerance: a wrong kernel fed equal inputs has a bound near zero, and
 * fails. The bound adds no tolerance per node, so it does not grow along a chain. */
#ifndef CGC_TESTS_DRIFT_H
#define CGC_TESTS_DRIFT_H

#include <stdbool.h>
#include <stdint.h>

#include "compiler/ir.h"

/* |d - c| relative to the larger of |c| and |d|; 0 when both are equal (non-finite
 * included). Symmetric and at most 2, so that it composes: for a product or quotient
 * the output's difference is at most the sum of its inputs' (1 - e^-x is subadditive in
 * the log-ratio x), also where a divisor shrinks on one executor only, and a sign flip
 * (at least 1) covers any output. */
double drift_rel(double c, double d);

/* One input of a node, for drift_bound. */
typedef struct DriftInput {
    const Shape *shape;
    const float *drift;   /* element by element; NULL: not known */
    const float *ref;     /* the reference's values (f32 nodes; sums read it) */
    const float *dev;     /* the device's, where it stored them; NULL: not known */
    const int32_t *index; /* i32 nodes: the reference's values (EMBED_GRAD reads them) */
} DriftInput;

/* Bounds node N's drift element by element into OUT (N's elements under SYMVALS) from
 * IN[0..N->nin) and REF_OUT, the reference's value of N (sums read it); false where N's
 * op has no rule or an input's drift is not known. */
bool drift_bound(const IrNode *n, const DriftInput *in, const float *ref_out,
                 const int64_t *symvals, float *out);

#endif
