/* inference.c: the program of --predict (passes.h).
 *
 * Prediction needs the evaluation graph's prediction and nothing else: not its loss or
 * its count of right answers (which read the labels), not the training graphs, not the
 * optimizer's state. What is left is what the plan lays out, so the memory plan of a
 * predicting run (`--explain --predict`) holds only what inference reads: the
 * parameters, batch norm's running statistics, the inputs and the activations.
 */
#include <stdlib.h>

#include "passes.h"

/* P->eval cut to the nodes its prediction reads. */
static void prune_eval(IrProgram *p)
{
    IrGraph *ev = &p->eval, g;
    int out = ev->output[IR_OUT_PREDICTION];
    bool *needed = ir_cone(ev, out);
    int *map = xmalloc((size_t)ev->nnodes * sizeof *map);
    ir_graph_init(&g, "eval");
    for (int id = 0; id < ev->nnodes; id++) {
        if (!needed[id]) continue;
        IrNode n = ev->nodes[id];
        for (int k = 0; k < n.nin; k++) n.in[k] = map[n.in[k]];
        n.group = 0;
        map[id] = ir_add_node(&g, &n);
    }
    g.output[IR_OUT_PREDICTION] = map[out];
    ir_graph_free(ev);
    *ev = g;
    free(needed);
    free(map);
}

void inference_lower(IrProgram *p)
{
    prune_eval(p);
    IrGraph *gone[] = { &p->forward, &p->train, &p->train_micro, &p->decode };
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++) {
        const char *name = gone[i]->name;
        ir_graph_free(gone[i]);
        ir_graph_init(gone[i], name);
    }
    bool *keep = xcalloc((size_t)p->ntensors + 1, sizeof *keep);
    for (int i = 0; i < p->nparams; i++) keep[i] = true;
    for (int id = 0; id < p->eval.nnodes; id++)
        if (ir_node_tensor(&p->eval.nodes[id]) >= 0) keep[p->eval.nodes[id].index] = true;
    ir_keep_tensors(p, keep);
    free(keep);
    p->inference = true;
    ir_verify(p, &p->eval);
}
