/* passes.h: the entry point of each compiler stage, in pipeline order. Each lives in a
 * file of its own (named below) that opens with what it does and why. */
#ifndef CGC_PASSES_H
#define CGC_PASSES_H

#include "../grammar/ast.h"
#include "ir.h"

/* sema.c: checks names, types, shapes and train entries of FILE and builds the program:
 * its tables, its `forward` graph (training mode: dropout active; outputs LOSS and
 * PREDICTION) and its TrainConfig. Reports every error it finds (continuing past the
 * first where it safely can) and returns NULL when there was any. */
IrProgram *sema_check(Source *src, const AstFile *file);

/* train_config.c: checks one train entry KEY = VALUE and stores it in P->cfg; the same
 * code path the train block uses, so command-line overrides (--batch 128, --optimizer
 * "sgd(lr = 0.1)") are checked and mean exactly what the file would. Errors are reported
 * against SRC at VALUE's locations. Returns 0, or -1 after a diagnostic. */
int sema_train_entry(Source *src, IrProgram *p, const char *key, SrcLoc key_loc,
                     const AstExpr *value);

/* train_config.c: records LOC as where KEY was written (TrainConfig.optimizer_loc and
 * the like; other keys are not kept): the train block gives its entries' locations, an
 * override {0,0}, since the file's line no longer says what is computed. */
void sema_train_key_loc(TrainConfig *cfg, const char *key, SrcLoc loc);

/* train_config.c: --lr: checks VALUE as the `lr` argument of P's optimizer (`adamw(lr =
 * VALUE)`: a constant expression, > 0) and stores it in P->cfg.lr. Returns 0, or -1 after
 * a diagnostic, as sema_train_entry. */
int sema_train_lr(Source *src, IrProgram *p, const AstExpr *value);

/* train_config.c: the rules that relate one key to another, which depend on what the
 * file and the command line gave together, so they are applied once, after the last
 * override (sema_check leaves them to its caller): `steps` without `epochs` (from either
 * place) means steps alone limit the run (epochs = 0); without a train block, one step. */
void sema_train_finish(TrainConfig *cfg);

/* precision.c: autocast by P->cfg.precision on P->forward, before autodiff: for bf16 and
 * fp16, MATMUL operands are cast to the half type and the product stored in it, ops that
 * follow stay in it, and softmax, losses, reductions and normalisation statistics are
 * computed in f32; for tf32, MATMULs get IR_MATMUL_TF32. fp32 leaves the graph as is. */
void precision_assign(IrProgram *p);

/* autodiff.c: reverse mode. Appends to G the nodes computing the gradient of scalar node
 * LOSS, seeded with node DLOSS (d loss / d loss, e.g. the fp16 loss scale, or CONST 1),
 * with respect to every persistent tensor of P read in G. GRADS[i] receives the node id
 * of tensor i's gradient, f32 and of the tensor's shape, or -1 when the loss does not
 * depend on it. */
void autodiff(IrGraph *g, const IrProgram *p, int loss, int dloss, int *grads);

/* training.c: from P->forward, builds P->train (loss scaling, autodiff, accumulation,
 * unscale and the inf/nan check, clipping, schedule, optimizer update, state updates),
 * P->train_micro when accumulate > 1, and P->eval; registers the optimizer state
 * tensors it needs. */
void training_lower(IrProgram *p);

/* precision.c: under bf16 and fp16, P->train, P->train_micro and P->eval (and so the
 * decode graph and --predict's cut of it) read each parameter's cast to the half type
 * from a copy of the parameter in that type (a tensor of kind IR_COPY, which it adds),
 * and P->train assigns the copy the cast of the parameter's new value after every
 * update. The same values as the casts it replaces. training_lower runs it last. */
void precision_copies(IrProgram *p);

/* decode.c: P->decode, P->eval's prediction one position at a time for a text model, the
 * keys and values of earlier positions kept in caches (tensors of kind IR_CACHE), which it
 * adds. Returns 0, or -1 with WHY (N bytes) saying what keeps the model from one, P as
 * it was. */
int decode_lower(IrProgram *p, char *why, size_t n);

/* inference.c: for --predict, P cut to its evaluation graph's prediction (loss, correct
 * count and labels gone), without the training graphs and the optimizer's state tensors
 * (P->inference set). */
void inference_lower(IrProgram *p);

/* recompute.c: activation checkpointing on P->train and P->train_micro.
 *
 * A schedule keeps some of the forward's cuts (values through which the forward narrows
 * to one) and recomputes, in the backward, every value it needs between two kept cuts:
 * matrix products, reductions and dropout included; leaves, assignments and collectives
 * never. recompute.c explains the cuts, the memory model and the solver. */
typedef struct RecomputeSchedule {
    int nkept;
    int *kept;          /* the cuts kept as segment ends: forward node ids, ascending */
    int nnodes;
    int *nodes;         /* the forward nodes the backward recomputes, ascending */
    int *segment_nodes;     /* per kept cut: how many of NODES its segment recomputes */
    double *segment_flops;  /* per kept cut: their FLOPs */
    double flops;       /* FLOPs to recompute them, per micro-batch (batch = cfg.batch) */
    double peak;        /* the modelled peak bytes of forward values (recompute.c) */
} RecomputeSchedule;

/* What checkpointing can do with a program: the frontier of schedules, each recomputing
 * the fewest FLOPs for its modelled peak, from S[0] (nothing recomputed) to S[N - 1]
 * (the least memory): FLOPs strictly ascending, peaks strictly descending. */
typedef struct RecomputeChoices {
    int ncuts;
    int *cuts;              /* every cut, ascending */
    double forward_flops;   /* of the forward's activations, per micro-batch */
    int n;
    RecomputeSchedule *s;
} RecomputeChoices;

void recompute_choices(const IrProgram *p, RecomputeChoices *c);
void recompute_choices_free(RecomputeChoices *c);
/* The FLOPs of one micro-batch's forward (its activations), as the schedules count them. */
double recompute_forward_flops(const IrProgram *p);
/* The schedule keeping the cuts among KEPT[0..N) (node ids; others are ignored), e.g. a
 * baseline keeping every k-th layer's input. */
void recompute_schedule(const IrProgram *p, const int *kept, int n, RecomputeSchedule *s);
void recompute_schedule_free(RecomputeSchedule *s);
/* Rebuilds P->train (and P->train_micro) so that the backward recomputes forward nodes
 * NODES[0..N) (a schedule's) instead of reading them: each gets one copy (marked
 * IrNode.recompute), placed just before its first backward reader, which reads the
 * copies of any other recomputed inputs. Gradients are unchanged bit for bit (the same
 * ops on the same values). N = 0 leaves the graphs as they are. */
void recompute_apply(IrProgram *p, const int *nodes, int n);

/* fusion.c: groups the nodes of every graph of P into kernels (IrGraph.groups, see
 * ir.h): elementwise chains, elementwise prologues of reductions, scalar chains recomputed
 * where they are used, optimizer updates stored in place, and multi-tensor launches of
 * the per-parameter groups. Reorders nodes so that each group's members are consecutive
 * (and clones the scalar chains it duplicates); keeps every graph's meaning. */
void fusion_assign(IrProgram *p);

/* boundaries.c: records in G->boundaries, for each pair of G's kernels that a value
 * crosses, the first of fusion's rules that keeps them apart (IrBoundary); fusion_assign
 * calls it last. */
void fusion_boundaries(IrGraph *g);

#endif
