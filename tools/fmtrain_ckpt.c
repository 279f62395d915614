/* SPDX-License-Identifier: MIT */
/*
 * fmtrain_ckpt.c - what fmtrain puts in a checkpoint and how --resume
 * takes it back.
 *
 * A checkpoint of step N (N updates done) holds, in rank 0's shard:
 *   param.*, adam_m.*, adam_v.*   f32, the model's tensors as
 *                                 train_model_tensors names and shapes
 *                                 them (gradients are not saved: the next
 *                                 step recomputes them from zero)
 *   loader.pos                    bytes: struct train_pos of this rank,
 *                                 where its next batch starts
 *   fmtrain.run                   bytes: the run record below (shape,
 *                                 hyperparameters, seeds, step)
 * and in the shard of each other rank (several ranks: --device cuda)
 * its own loader.pos and fmtrain.run.  The model's tensors are only in
 * rank 0's: the ranks hold identical replicas.  The CPU and the GPU back
 * ends save the same tensors under the same names and shapes, so either
 * resumes from the other's checkpoints (exactly only on the back end
 * that saved it: the GPU's matmuls are bf16).
 *
 * The learning rate is constant, so the record's copy of it is the whole
 * schedule state; the model has no dropout and no other randomness, so
 * that is everything a bit-exact continuation needs (model.h,
 * "Reproducibility").
 *
 * On --resume every rank reads its own shard's record and position and
 * checks them; rank 0 alone reads the model, into host memory its back
 * end gives (the CPU model's own buffers; a staging buffer the GPU back
 * end uploads), and the back end then hands rank 0's state to the others
 * (train_gpu_broadcast).
 *
 * The run record, 128 bytes, little-endian (docs/training.md):
 *   offset size  field
 *        0    8  magic "FMTRAIN\0"
 *        8    4  version (1)
 *       12    4  layers          16  4  heads         20  4  channels
 *       24    4  max_seq_len     28  4  vocab_size    32  4  padded_vocab
 *       36    4  batch           40  4  seq_len       44  4  world_size
 *       48    4  learning_rate   52  4  beta1         56  4  beta2
 *       60    4  eps             64  4  weight_decay  68  4  grad_clip
 *                (f32 bit patterns)
 *       72    8  seed (parameters)   80  8  data_seed (loader shuffles)
 *       88    8  step            96 32  zero
 * libfmckpt's per-tensor CRC32C covers it like any tensor.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fmtrain.h"

#define RUN_MAGIC "FMTRAIN\0"

static uint32_t fbits(float f)
{
	uint32_t v;

	memcpy(&v, &f, sizeof(v));
	return v;
}

static float bitsf(uint32_t v)
{
	float f;

	memcpy(&f, &v, sizeof(f));
	return f;
}

static void rec_encode(const struct fmtrain_run_rec *r,
		       unsigned char b[FMTRAIN_RUN_BYTES])
{
	const struct train_config *c = &r->cfg;

	memset(b, 0, FMTRAIN_RUN_BYTES);
	memcpy(b, RUN_MAGIC, 8);
	util_put32le(b + 8, FMTRAIN_RUN_VERSION);
	util_put32le(b + 12, c->layers);
	util_put32le(b + 16, c->heads);
	util_put32le(b + 20, c->channels);
	util_put32le(b + 24, c->max_seq_len);
	util_put32le(b + 28, c->vocab_size);
	util_put32le(b + 32, c->padded_vocab_size);
	util_put32le(b + 36, c->batch);
	util_put32le(b + 40, c->seq_len);
	util_put32le(b + 44, r->world_size);
	util_put32le(b + 48, fbits(c->learning_rate));
	util_put32le(b + 52, fbits(c->beta1));
	util_put32le(b + 56, fbits(c->beta2));
	util_put32le(b + 60, fbits(c->eps));
	util_put32le(b + 64, fbits(c->weight_decay));
	util_put32le(b + 68, fbits(c->grad_clip));
	util_put64le(b + 72, c->seed);
	util_put64le(b + 80, r->data_seed);
	util_put64le(b + 88, r->step);
}

static int rec_decode(const unsigned char b[FMTRAIN_RUN_BYTES],
		      struct fmtrain_run_rec *r)
{
	struct train_config *c = &r->cfg;

	if (memcmp(b, RUN_MAGIC, 8))
		return -EBADMSG;
	r->version = util_get32le(b + 8);
	if (r->version != FMTRAIN_RUN_VERSION)
		return -EPROTONOSUPPORT;
	memset(c, 0, sizeof(*c));
	c->layers = util_get32le(b + 12);
	c->heads = util_get32le(b + 16);
	c->channels = util_get32le(b + 20);
	c->max_seq_len = util_get32le(b + 24);
	c->vocab_size = util_get32le(b + 28);
	c->padded_vocab_size = util_get32le(b + 32);
	c->batch = util_get32le(b + 36);
	c->seq_len = util_get32le(b + 40);
	r->world_size = util_get32le(b + 44);
	c->learning_rate = bitsf(util_get32le(b + 48));
	c->beta1 = bitsf(util_get32le(b + 52));
	c->beta2 = bitsf(util_get32le(b + 56));
	c->eps = bitsf(util_get32le(b + 60));
	c->weight_decay = bitsf(util_get32le(b + 64));
	c->grad_clip = bitsf(util_get32le(b + 68));
	c->seed = util_get64le(b + 72);
	r->data_seed = util_get64le(b + 80);
	r->step = util_get64le(b + 88);
	return 0;
}

/* ---- saving ---- */

int fmtrain_ckpt_save(struct ckpt *c, const struct fmtrain_save *s,
		      uint64_t step, uint64_t *block_ns, char *msg,
		      size_t msg_len)
{
	struct fmtrain_run_rec rec = { 0 };
	unsigned char b[FMTRAIN_RUN_BYTES];
	uint64_t t0 = util_now_ns();
	int64_t shape[1];
	int rc;

	rec.version = FMTRAIN_RUN_VERSION;
	rec.cfg = *s->cfg;
	rec.world_size = s->pos->world_size;
	rec.data_seed = s->data_seed;
	rec.step = step;
	rec_encode(&rec, b);
	rc = ckpt_begin(c, step, msg, msg_len);
	for (size_t i = 0; i < s->n && !rc; i++) {
		const struct train_tensor *t = &s->t[i];

		if (t->kind == TRAIN_GRADS)
			continue;
		rc = ckpt_add(c, t->name, CKPT_F32, t->ndim, t->shape, t->data,
			      t->count * sizeof(float), s->flags, msg,
			      msg_len);
	}
	shape[0] = sizeof(*s->pos);
	if (!rc)
		rc = ckpt_add(c, FMTRAIN_POS_NAME, CKPT_BYTES, 1, shape, s->pos,
			      sizeof(*s->pos), 0, msg, msg_len);
	shape[0] = FMTRAIN_RUN_BYTES;
	if (!rc)
		rc = ckpt_add(c, FMTRAIN_RUN_NAME, CKPT_BYTES, 1, shape, b,
			      sizeof(b), 0, msg, msg_len);
	if (!rc)
		rc = ckpt_commit(c, msg, msg_len);
	else if (rc != -EEXIST && rc != -EBUSY)
		ckpt_abort(c);
	*block_ns = util_now_ns() - t0;
	return rc;
}

/* ---- resume ---- */

/* "Not starting over": what to do about a checkpoint that cannot be
 * used. */
static int unusable(const struct fmtrain_resume *r, const char *what,
		    const char *why)
{
	fprintf(stderr, PROG ": --resume: checkpoint step %" PRIu64 " in %s "
		"%s: %s\n", r->step, r->where, what, why);
	fprintf(stderr, PROG ": not starting over.  Check it with `fmckpt "
		"verify %" PRIu64 " -t %s`; resume an older one with "
		"--resume=STEP (`fmckpt list -t %s`), or remove this one and "
		"resume again\n", r->step, r->target, r->target);
	return EXIT_FAIL;
}

static int read_bytes(struct fmtrain_resume *r, const char *name,
		      void *buf, uint64_t len)
{
	const struct ckpt_tensor_info *t;
	char msg[1024], why[1200];
	int rc;

	t = ckpt_reader_find(r->reader, r->rank, name);
	if (!t) {
		snprintf(why, sizeof(why), "it has no tensor '%s': not written "
			 "by fmtrain, or by another version", name);
		return unusable(r, "cannot be resumed", why);
	}
	if (t->size_bytes != len) {
		snprintf(why, sizeof(why), "tensor '%s' is %" PRIu64 " bytes, "
			 "not %" PRIu64, name, t->size_bytes, len);
		return unusable(r, "cannot be resumed", why);
	}
	rc = ckpt_reader_read(r->reader, t, buf, len, msg, sizeof(msg));
	if (rc)
		return unusable(r, rc == -EBADMSG ? "is corrupt" :
				"cannot be read", msg);
	return EXIT_OK;
}

/* The options that must be those of the run that saved the checkpoint. */
static int check_compat(const struct fmtrain_resume *r,
			const struct fmtrain_opts *o)
{
	const struct train_config *a = &r->rec.cfg, *b = &o->model;
	const char *opt = NULL;
	char was[64] = "", now[64] = "";

#define CMP_U(field, name) \
	if (!opt && a->field != b->field) { \
		opt = name; \
		snprintf(was, sizeof(was), "%u", a->field); \
		snprintf(now, sizeof(now), "%u", b->field); \
	}
#define CMP_F(field, name) \
	if (!opt && fbits(a->field) != fbits(b->field)) { \
		opt = name; \
		snprintf(was, sizeof(was), "%.9g", (double)a->field); \
		snprintf(now, sizeof(now), "%.9g", (double)b->field); \
	}
	CMP_U(layers, "--layers")
	CMP_U(heads, "--heads")
	CMP_U(channels, "--channels")
	CMP_U(seq_len, "--seq-len")
	CMP_U(max_seq_len, "--seq-len")
	CMP_U(vocab_size, "--vocab")
	CMP_U(padded_vocab_size, "--padded-vocab")
	CMP_U(batch, "--batch")
	CMP_F(learning_rate, "--lr")
	CMP_F(beta1, "beta1")
	CMP_F(beta2, "beta2")
	CMP_F(eps, "eps")
	CMP_F(weight_decay, "the weight decay")
	CMP_F(grad_clip, "the gradient clip")
#undef CMP_U
#undef CMP_F
	if (!opt && (a->seed != b->seed || r->rec.data_seed != b->seed)) {
		opt = "--seed";
		snprintf(was, sizeof(was), "%" PRIu64, a->seed);
		snprintf(now, sizeof(now), "%" PRIu64, b->seed);
	}
	if (!opt && r->rec.world_size != o->world.world_size) {
		opt = "WORLD_SIZE";
		snprintf(was, sizeof(was), "%u", r->rec.world_size);
		snprintf(now, sizeof(now), "%u", o->world.world_size);
	}
	if (!opt)
		return EXIT_OK;
	fprintf(stderr, PROG ": --resume: checkpoint step %" PRIu64 " in %s "
		"was saved with %s %s; this run has %s.  Resume with the "
		"options it was saved with, or give another --ckpt to start a "
		"new run\n", r->step, r->where, opt, was, now);
	return EXIT_USAGE;
}

static const char *ckpt_target(const struct fmtrain_opts *o)
{
	return o->ckpt_dir ? o->ckpt_dir : o->ckpt_remote;
}

/* The step to resume: the newest complete checkpoint, or none. */
static int newest(struct ckpt *c, const struct fmtrain_opts *o,
		  struct fmtrain_resume *r)
{
	struct ckpt_step_info *v;
	char msg[1024];
	size_t n;
	int rc;

	rc = ckpt_list(c, &v, &n, &r->incomplete, msg, sizeof(msg));
	if (rc) {
		fprintf(stderr, PROG ": --resume: cannot list the checkpoints "
			"in %s: %s\n", ckpt_target(o), msg[0] ? msg :
			strerror(-rc));
		return EXIT_FAIL;
	}
	if (!n) {
		free(v);
		return EXIT_OK;
	}
	r->found = true;
	r->step = v[0].step;
	rc = v[0].error;
	/* why names the file that is wrong: the manifest or a shard */
	if (rc)
		rc = unusable(r, rc == -EBADMSG ? "is corrupt" :
			      "cannot be opened", v[0].why);
	free(v);
	return rc;
}

int fmtrain_resume_open(struct ckpt *c, const struct fmtrain_opts *o,
			struct fmtrain_resume *r)
{
	unsigned char b[FMTRAIN_RUN_BYTES];
	char msg[1024];
	int rc;

	memset(r, 0, sizeof(*r));
	r->target = ckpt_target(o);
	r->rank = o->world.rank;
	snprintf(r->where, sizeof(r->where), "%s", r->target);
	if (o->resume_step == CKPT_STEP_LATEST) {
		rc = newest(c, o, r);
		if (rc || !r->found)
			return rc;
	} else {
		r->found = true;
		r->step = o->resume_step;
	}
	rc = ckpt_reader_open(c, r->step, &r->reader, msg, sizeof(msg));
	if (rc == -ENOENT && o->resume_step != CKPT_STEP_LATEST) {
		fprintf(stderr, PROG ": --resume=%" PRIu64 ": %s\n", r->step,
			msg);
		return EXIT_FAIL;
	}
	if (rc)
		return unusable(r, rc == -EBADMSG ? "is corrupt" :
				"cannot be opened", msg);
	snprintf(r->where, sizeof(r->where), "%s",
		 ckpt_reader_where(r->reader));
	if (ckpt_reader_world_size(r->reader) != o->world.world_size) {
		/* Each rank's loader position is its own: a resume with
		 * another number of ranks cannot continue the same stream. */
		fprintf(stderr, PROG ": --resume: checkpoint step %" PRIu64
			" in %s was saved by %u rank(s); this run has "
			"WORLD_SIZE %u.  Resume with the number of ranks it was "
			"saved with, or give another --ckpt to start a new "
			"run\n", r->step, r->where,
			ckpt_reader_world_size(r->reader), o->world.world_size);
		return EXIT_USAGE;
	}
	if ((rc = read_bytes(r, FMTRAIN_RUN_NAME, b, sizeof(b))))
		return rc;
	rc = rec_decode(b, &r->rec);
	if (rc)
		return unusable(r, "cannot be resumed", rc == -EBADMSG ?
				"its run record is not fmtrain's" :
				"its run record is of a version this fmtrain "
				"does not read");
	if (r->rec.step != r->step) {
		snprintf(msg, sizeof(msg), "its run record says step %" PRIu64,
			 r->rec.step);
		return unusable(r, "is inconsistent", msg);
	}
	if ((rc = check_compat(r, o)))
		return rc;
	if ((rc = read_bytes(r, FMTRAIN_POS_NAME, &r->pos, sizeof(r->pos))))
		return rc;
	if (r->pos.version != TRAIN_POS_VERSION || r->pos.rank != r->rank ||
	    r->pos.world_size != o->world.world_size)
		return unusable(r, "cannot be resumed", "its loader position "
				"is of another version or rank");
	return EXIT_OK;
}

/* Reads the parameters and moments, a kind at a time, into the host
 * memory the back end gives, and has it load them. */
static int read_model(struct fmtrain_resume *r, struct fmtrain_model *m)
{
	static const enum train_kind kinds[] = {
		TRAIN_PARAMS, TRAIN_ADAM_M, TRAIN_ADAM_V
	};
	struct train_tensor t[TRAIN_TENSORS];
	size_t n = m->be->tensors(m, t, TRAIN_TENSORS);
	size_t nparams = m->be->num_params(m);
	char msg[1024], why[1400];
	int rc;

	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		float *host = m->be->restore_buffer(m, kinds[k]);
		size_t at = 0;   /* train_model_buffer's layout */

		if (!host) {
			fprintf(stderr, PROG ": --resume: no memory for %zu "
				"parameters in host memory\n", nparams);
			return EXIT_FAIL;
		}
		for (size_t i = 0; i < n; i++) {
			const struct ckpt_tensor_info *ti;

			if (t[i].kind != kinds[k])
				continue;
			if (t[i].count > nparams - at)
				abort();   /* a bug: tensors() and num_params()
				            * of the back end disagree */
			ti = ckpt_reader_find(r->reader, 0, t[i].name);
			if (!ti || ti->dtype != CKPT_F32 ||
			    ti->ndim != t[i].ndim ||
			    memcmp(ti->shape, t[i].shape,
				   t[i].ndim * sizeof(int64_t))) {
				ckpt_shape_format(t[i].ndim, t[i].shape, msg,
						  sizeof(msg));
				snprintf(why, sizeof(why), "it has no f32 "
					 "tensor '%s' of shape %s", t[i].name,
					 msg);
				return unusable(r, "cannot be resumed", why);
			}
			rc = ckpt_reader_read(r->reader, ti, host + at,
					      t[i].count * sizeof(float), msg,
					      sizeof(msg));
			if (rc)
				return unusable(r, rc == -EBADMSG ?
						"is corrupt" : "cannot be read",
						msg);
			at += t[i].count;
		}
		msg[0] = '\0';
		rc = m->be->restore_load(m, kinds[k], msg, sizeof(msg));
		if (rc) {
			fprintf(stderr, PROG ": --resume: cannot load the "
				"checkpoint's state into the model: %s\n",
				msg[0] ? msg : strerror(-rc));
			return EXIT_FAIL;
		}
	}
	return EXIT_OK;
}

int fmtrain_resume_finish(struct fmtrain_resume *r, struct fmtrain_model *m,
			  bool read_tensors)
{
	char msg[1024] = "";
	int rc = EXIT_OK;

	if (read_tensors)
		rc = read_model(r, m);
	fmtrain_resume_release(r);
	if (rc)
		return rc;
	if (m->be->restored(m, r->step, r->rec.cfg.learning_rate, msg,
			    sizeof(msg))) {
		fprintf(stderr, PROG ": --resume: %s\n", msg[0] ? msg :
			"cannot set the model's step and learning rate");
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

void fmtrain_resume_release(struct fmtrain_resume *r)
{
	ckpt_reader_close(r->reader);
	r->reader = NULL;
}
