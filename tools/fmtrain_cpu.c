/* SPDX-License-Identifier: MIT */
/*
 * fmtrain_cpu.c - `fmtrain train --device cpu`: the back end table
 * (fmtrain.h) over the CPU reference model of train/model.h.  One
 * process: no rendezvous, no agreement between ranks.  Its tensors are
 * host memory, so a restore reads straight into the model's own buffers.
 */
#include <errno.h>

#include "fmtrain.h"

static struct train_model *cpu(const struct fmtrain_model *m)
{
	return m->priv;
}

static int cpu_init(struct fmtrain_model *m, const struct train_config *cfg,
		    const struct fmtrain_world *w, const unsigned char *id,
		    char *msg, size_t msg_len)
{
	struct train_model *tm;
	int rc;

	rc = train_model_init(cfg, &tm, msg, msg_len);
	if (rc)
		return rc;
	m->priv = tm;
	m->cfg = *train_model_config(tm);
	return 0;
}

static void cpu_free(struct fmtrain_model *m)
{
	train_model_free(cpu(m));
	m->priv = NULL;
}

static const char *cpu_device(const struct fmtrain_model *m)
{
	return "cpu";
}

static size_t cpu_num_params(const struct fmtrain_model *m)
{
	return train_model_num_params(cpu(m));
}

static uint64_t cpu_bytes(const struct fmtrain_model *m)
{
	return train_model_bytes(cpu(m));
}

static int cpu_step(struct fmtrain_model *m, const int32_t *inputs,
		    const int32_t *targets, float *loss, char *msg,
		    size_t msg_len)
{
	return train_step(cpu(m), inputs, targets, loss, msg, msg_len);
}

static size_t cpu_tensors(struct fmtrain_model *m, struct train_tensor *out,
			  size_t max)
{
	return train_model_tensors(cpu(m), out, max);
}

/* The model's own buffer: what is read there is loaded already. */
static float *cpu_restore_buffer(struct fmtrain_model *m,
				 enum train_kind kind)
{
	size_t n;

	return train_model_buffer(cpu(m), kind, &n);
}

static int cpu_restore_load(struct fmtrain_model *m, enum train_kind kind,
			    char *msg, size_t msg_len)
{
	return 0;
}

static int cpu_restored(struct fmtrain_model *m, uint64_t step, float lr,
			char *msg, size_t msg_len)
{
	train_model_set_step(cpu(m), step);
	return train_set_learning_rate(cpu(m), lr);
}

const struct fmtrain_backend fmtrain_cpu_backend = {
	.name = "cpu",
	.device_memory = false,
	.ranks = false,
	.probe = NULL,
	.dist_id = NULL,
	.init = cpu_init,
	.free = cpu_free,
	.device = cpu_device,
	.num_params = cpu_num_params,
	.bytes = cpu_bytes,
	.step = cpu_step,
	.tensors = cpu_tensors,
	.restore_buffer = cpu_restore_buffer,
	.restore_load = cpu_restore_load,
	.restored = cpu_restored,
	.agree = NULL,
};
