/* SPDX-License-Identifier: MIT */
/*
 * model.h - fmtrain's model: a GPT-2-family decoder with its forward
 * pass, backward pass and AdamW optimiser.  This is the CPU reference,
 * in fp32: plain C, matmuls through OpenBLAS, threads through OpenMP.
 * Later back ends (CUDA) are checked against it.
 *
 * The network.  Token and position embeddings (wte, wpe) are summed, go
 * through `layers` pre-norm transformer blocks
 *     x = x + attn_proj(causal_attention(qkv(layernorm1(x))))
 *     x = x + fc_proj(gelu(fc(layernorm2(x))))
 * with heads attention heads and an MLP 4 * channels wide, then a final
 * layernorm; the output head is tied to the token embedding (logits =
 * x . wte^T), and the loss is the mean cross-entropy of the softmax over
 * the vocabulary.  GELU is the tanh approximation, layernorm eps 1e-5.
 *
 * Vocabulary padding.  wte has padded_vocab_size rows (Vp >= V), so that
 * its shape can be a multiple of 64 or 128 for fast kernels; only the
 * first vocab_size are tokens.  The padded rows start at 0, their logits
 * are left out of the softmax (probability 0), and they never receive a
 * gradient, so they stay 0.
 *
 * Initialisation, from cfg.seed alone, the same on every machine: every
 * weight matrix is normal with standard deviation 0.02, except wpe (0.01)
 * and the two projections into the residual stream (attn_proj, fc_proj:
 * 0.02 / sqrt(2 * layers), as in GPT-2); biases are 0, layernorm weights
 * 1.  Each tensor draws from its own stream of a splitmix64 generator
 * seeded with seed + (its index + 1) * 0x9E3779B97F4A7C15, element by
 * element in order, one Box-Muller normal per two draws (train_int.h).
 * So a tensor's values depend only on the seed and its own shape, not on
 * the sizes of the others.
 *
 * Optimiser: AdamW with decoupled weight decay.  At update t = step + 1:
 *     m = beta1 m + (1 - beta1) g          v = beta2 v + (1 - beta2) g^2
 *     p -= lr * ((m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
 *                + weight_decay * p)
 * Weight decay applies to the weight matrices (wte, wpe, qkv, attn_proj,
 * fc, fc_proj), not to biases or layernorm parameters.  With grad_clip
 * > 0 and a global L2 norm of the gradients above it, g is the gradient
 * scaled down to that norm.
 *
 * Reproducibility.  The same configuration, seed and inputs give the same
 * bits on the same kind of CPU with the same library versions (OpenBLAS
 * picks its kernels by CPU), whatever the number of threads: no result
 * depends on how work is split between threads (see train_int.h).  A
 * model restored from its parameters, AdamW moments and step counter
 * (train_model_tensors, train_model_set_step) continues exactly as the
 * one saved would have; the gradients need not be saved.
 *
 * Sizes.  Batch B and sequence length T are fixed at init; every buffer
 * is allocated then and never grows.  train_config_check says how many
 * bytes a configuration needs before anything is allocated: 4 floats per
 * parameter, the activations (about L * B * T * (17 C + NH * T) floats,
 * attention weights included), the gradients of one layer's activations
 * (about 19 * B * T * C) and the logits, probabilities and their
 * gradient (3 * B * T * Vp).
 *
 * Threads.  A struct train_model is used by one thread at a time; its
 * functions run OpenMP loops inside (OMP_NUM_THREADS sets how many
 * threads).  Two models may be used from two threads at once: they share
 * no state, only the OpenMP thread pool.  The matmuls split their work
 * themselves and call OpenBLAS single-threaded, so every matmul sets
 * OpenBLAS to one thread for the whole process
 * (openblas_set_num_threads(1)): other OpenBLAS users in the same
 * process then run single-threaded too.
 *
 * Errors.  Functions return 0 or a negative errno and write a line a
 * person can act on into msg (msg_len bytes; msg may be NULL): -EINVAL
 * for a bad configuration, token or call order, -ENOMEM when the buffers
 * cannot be allocated, -ERANGE for gradients that are not finite.
 */
#ifndef FMFS_TRAIN_MODEL_H
#define FMFS_TRAIN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRAIN_LAYERS_MAX 1024u
#define TRAIN_CHANNELS_MAX 65536u
#define TRAIN_SEQ_MAX 1048576u        /* max_seq_len */
#define TRAIN_VOCAB_MAX 16777216u     /* padded_vocab_size */
#define TRAIN_POSITIONS_MAX (1u << 28) /* batch * seq_len */

struct train_config {
	/* shape of the network */
	unsigned layers;            /* L: transformer blocks */
	unsigned heads;             /* NH: attention heads; divides channels */
	unsigned channels;          /* C: width of the residual stream */
	unsigned max_seq_len;       /* rows of wpe: the longest context */
	unsigned vocab_size;        /* V: tokens are 0 .. V-1 */
	unsigned padded_vocab_size; /* Vp >= V: rows of wte; 0: V */
	/* shape of a step */
	unsigned batch;             /* B: sequences per step */
	unsigned seq_len;           /* T <= max_seq_len: tokens per sequence */
	/* AdamW */
	float learning_rate;        /* >= 0; see train_set_learning_rate */
	float beta1, beta2;         /* in [0, 1) */
	float eps;                  /* > 0 */
	float weight_decay;         /* >= 0 */
	float grad_clip;            /* max global gradient norm; 0: no clip */
	uint64_t seed;              /* parameter initialisation */
};

/* Defaults: GPT-2 124M (12 layers, 12 heads, 768 channels, 1024
 * positions, V 50257 padded to 50304), B 4, T 64; learning rate 3e-4,
 * betas 0.9 and 0.95, eps 1e-8, weight decay 0.1, grad_clip 1.0, seed
 * 1337. */
void train_config_init(struct train_config *cfg);

/* Checks cfg without allocating anything: -EINVAL (and why, in msg) for
 * heads that do not divide channels, a zero or too large size, seq_len
 * over max_seq_len, padded_vocab_size under vocab_size, a hyperparameter
 * out of range.  *bytes (may be NULL) gets the memory train_model_init
 * would allocate. */
int train_config_check(const struct train_config *cfg, uint64_t *bytes,
		       char *msg, size_t msg_len);

struct train_model;

/* Allocates a model (parameters, gradients, AdamW moments, activations,
 * all zeroed) and initialises its parameters from cfg->seed.  cfg is
 * copied.  Step 0.  Free with train_model_free. */
int train_model_init(const struct train_config *cfg,
		     struct train_model **out, char *msg, size_t msg_len);
/* Frees everything the model owns; NULL is a no-op.  Pointers from the
 * accessors below become invalid. */
void train_model_free(struct train_model *m);

/* The configuration in use: learning_rate is the current one and
 * padded_vocab_size the one used (vocab_size if 0 was given).  Borrowed
 * until train_model_free. */
const struct train_config *train_model_config(const struct train_model *m);
/* Number of parameters (floats), padded wte rows included. */
size_t train_model_num_params(const struct train_model *m);
/* Bytes the model allocated (what train_config_check announced). */
uint64_t train_model_bytes(const struct train_model *m);

/* ---- one step ---- */

/* Runs the network on inputs (B*T tokens, row b at inputs + b*T).  With
 * targets (B*T tokens: the token that should follow each input; may be
 * NULL) also the loss: *loss (may be NULL) gets the mean cross-entropy,
 * and train_backward may follow.  Without targets *loss is NAN.  A token
 * outside 0 .. V-1 is -EINVAL and nothing is computed.  Both arrays are
 * copied (train_backward needs them): the caller may reuse them when the
 * call returns. */
int train_forward(struct train_model *m, const int32_t *inputs,
		  const int32_t *targets, float *loss, char *msg,
		  size_t msg_len);

/* The checks train_forward makes of a batch for cfg, on their own (other
 * back ends make the same): inputs given, and every token of inputs and
 * of targets (may be NULL), B*T each, in 0 .. vocab_size-1.  -EINVAL
 * naming the first bad token and its place. */
int train_check_batch(const struct train_config *cfg, const int32_t *inputs,
		      const int32_t *targets, char *msg, size_t msg_len);

/* Sets every gradient to 0. */
void train_zero_grad(struct train_model *m);

/* Adds to the gradients the gradient of the mean loss of the last
 * forward pass (so several backward passes between two train_zero_grad
 * calls accumulate).  -EINVAL if the last train_forward had no targets
 * or failed, or if there was none. */
int train_backward(struct train_model *m, char *msg, size_t msg_len);

/* One AdamW update from the gradients, then step + 1.  The gradients
 * are left as they are (clipping scales what the update reads, not
 * them).  *grad_norm (may be NULL) gets their global L2 norm before
 * clipping.  -ERANGE if that norm is not finite: then nothing changes
 * (parameters, moments, step). */
int train_update(struct train_model *m, float *grad_norm, char *msg,
		 size_t msg_len);

/* zero_grad, forward, backward, update: one training step.  *loss (may
 * be NULL) gets the loss of the forward pass.  targets are required
 * (-EINVAL without); on an error no update is made. */
int train_step(struct train_model *m, const int32_t *inputs,
	       const int32_t *targets, float *loss, char *msg,
	       size_t msg_len);

/* The learning rate of the following updates (for a schedule: call it
 * before each train_update).  -EINVAL unless finite and >= 0. */
int train_set_learning_rate(struct train_model *m, float lr);

/* Results of the last forward pass, (B, T, Vp) row-major, borrowed until
 * the next train_forward or train_model_free.  logits are the raw head
 * outputs; probs their softmax over the first V columns (0 beyond). */
const float *train_model_logits(const struct train_model *m);
const float *train_model_probs(const struct train_model *m);

/* ---- state, for checkpoints ---- */

/* AdamW updates done so far: the t of the next update is this + 1. */
uint64_t train_model_step(const struct train_model *m);
void train_model_set_step(struct train_model *m, uint64_t step);

enum train_kind {
	TRAIN_PARAMS = 0,   /* the weights */
	TRAIN_GRADS,        /* their gradients */
	TRAIN_ADAM_M,       /* AdamW first moment */
	TRAIN_ADAM_V,       /* AdamW second moment */
	TRAIN_KIND_COUNT
};

#define TRAIN_PARAM_TENSORS 16       /* tensors of each kind */
#define TRAIN_TENSORS (TRAIN_PARAM_TENSORS * TRAIN_KIND_COUNT)
#define TRAIN_NDIM_MAX 3

/* One tensor of the model's state.  Every kind holds the same 16
 * tensors in the same order and shapes; per-layer tensors are stacked,
 * layer first: "param.qkv_w" is (L, 3C, C). */
struct train_tensor {
	const char *name;          /* "param.wte", "grad.ln1_w",
	                            * "adam_m.fc_b", "adam_v.lnf_b"...: unique;
	                            * a static string */
	enum train_kind kind;
	float *data;               /* inside the model's buffer of that kind */
	size_t count;              /* floats */
	unsigned ndim;
	int64_t shape[TRAIN_NDIM_MAX];
};

/* Fills out[0 .. max-1] with the first tensors of the list (parameters,
 * then gradients, then m, then v; in each, wte, wpe, ln1_w, ln1_b,
 * qkv_w, qkv_b, attn_proj_w, attn_proj_b, ln2_w, ln2_b, fc_w, fc_b,
 * fc_proj_w, fc_proj_b, lnf_w, lnf_b) and returns how many the list has
 * (TRAIN_TENSORS).  The data pointers are borrowed until
 * train_model_free; writing through them (a restore) is allowed between
 * calls. */
size_t train_model_tensors(struct train_model *m, struct train_tensor *out,
			   size_t max);

/* The whole buffer of one kind: the tensors above back to back in that
 * order, *count floats (train_model_num_params).  Borrowed like the
 * tensors.  NULL for a kind out of range. */
float *train_model_buffer(struct train_model *m, enum train_kind kind,
			  size_t *count);

/* ---- the parameters without a model (for other back ends) ---- */

/* The layout of one kind's buffer for cfg, as train_model_tensors gives
 * it, without allocating anything: out[0 .. TRAIN_PARAM_TENSORS-1] (may
 * be NULL) get each tensor's name, kind, count, ndim, shape and data =
 * base + its offset (NULL when base is NULL); offsets (may be NULL) get
 * the offsets in floats.  Returns num_params, or 0 for a configuration
 * train_config_check refuses or a kind out of range.  base is only
 * offset, never read: it may be device memory. */
size_t train_param_layout(const struct train_config *cfg,
			  enum train_kind kind, float *base,
			  struct train_tensor *out, size_t *offsets);
/* Writes the initial parameters for cfg (cfg->seed) into params
 * (num_params floats, host memory): the values train_model_init starts
 * from.  -EINVAL for a configuration train_config_check refuses. */
int train_params_init(const struct train_config *cfg, float *params);
/* Whether AdamW's weight decay applies to parameter tensor `index` (in
 * the order above): the weight matrices, not biases or layernorms. */
bool train_param_decays(unsigned index);

#ifdef __cplusplus
}
#endif
#endif /* FMFS_TRAIN_MODEL_H */
