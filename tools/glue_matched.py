r"""The sharedbert half of a matched GLUE fine-tuning comparison with Hugging Face (issue 43):
one seed, dropout off, the classifier's initialisation and the batch order written out so
that tools/hf_glue_reference.py --matched=OUT can repeat the run step for step in PyTorch.

  python tools/glue_matched.py --encoder=W/encoder --glue_dir=DATA/glue --task=sst2 \
      --out=OUT [--seed=0 --seq_len=64 --max_train_examples=2000 --epochs=3 \
      --batch_size=32 --lr=1e-4 --dropout=0]
  HF_PYTHON tools/hf_glue_reference.py --matched=OUT --model_dir=DATA/pretrained/... \
      --glue_dir=DATA/glue --task=sst2 --out=OUT/hf.json

`--encoder` is a sharedbert workdir (`sharedbert convert_hf import` of the Hugging Face
checkpoint). Writes OUT/init/ (the untrained classifier, encoder and fresh head, exported
by sharedbert.convert.hf as BertForSequenceClassification with the tokenizer), and
OUT/sharedbert.npz: the rows' token ids as sharedbert tokenized them (train and dev), the
order of every epoch (engine.epoch_order, as fit_epoch draws it), the learning rate
and the training loss of every step, and the dev predictions at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

from configs import glue as glue_config  # noqa: E402
from sharedbert import optim as optim_lib  # noqa: E402
from sharedbert.convert import hf as convert_hf  # noqa: E402
from sharedbert.convert import hf_tokenizer  # noqa: E402
from sharedbert.data import glue  # noqa: E402
from sharedbert.models.layout import unstack_layers  # noqa: E402
from sharedbert.tasks import engine, finetune, glue_task  # noqa: E402
from sharedbert.tasks import pretrained as pretrained_lib  # noqa: E402


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--encoder', required=True, help='a sharedbert workdir (imported encoder)')
  parser.add_argument('--glue_dir', required=True)
  parser.add_argument('--task', default='sst2', help='a classification task (not stsb)')
  parser.add_argument('--out', required=True, help='where init/ and sharedbert.* are written')
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--seq_len', type=int, default=64)
  parser.add_argument('--max_train_examples', type=int, default=2000)
  parser.add_argument('--epochs', type=int, default=3)
  parser.add_argument('--batch_size', type=int, default=32)
  parser.add_argument('--lr', type=float, default=1e-4)
  parser.add_argument('--dropout', type=float, default=0.0,
                      help='hidden, attention and classifier dropout (the matched run: 0)')
  args = parser.parse_args()
  if glue.get_task(args.task).is_regression:  # The reference repeats a cross-entropy run.
    raise SystemExit(f'{args.task} is a regression task; the matched run takes a '
                     'classification task (cola, sst2, mrpc, ...)')

  config = glue_config.get_config(f'task={args.task},seeds=1')
  config.init_from = args.encoder
  config.seed = args.seed
  config.data.glue_dir = args.glue_dir
  config.data.seq_len = args.seq_len
  config.data.max_train_examples = args.max_train_examples
  config.num_epochs = args.epochs
  config.batch_size = args.batch_size
  config.optim.lr = args.lr
  config.eval.predict_test = False
  config.ckpt.max_to_keep = 0
  config.log_every_steps = 0
  os.makedirs(args.out, exist_ok=True)
  mesh, axis_rules, pretrained, _ = finetune.preflight(config, args.out)
  model_cfg = dataclasses.replace(pretrained.model_config, dropout_rate=args.dropout,
                                  attention_dropout_rate=args.dropout)
  pretrained = dataclasses.replace(pretrained, model_config=model_cfg)
  target = pretrained_lib.abstract_encoder(model_cfg, mesh, axis_rules)
  encoder, _ = pretrained_lib.restore_encoder_params(config.init_from, target)
  run = glue_task.TaskRun(config, args.task, pretrained, mesh, axis_rules, encoder, None,
                          args.out)
  spec = run.spec
  with jax.set_mesh(mesh), nn.logical_axis_rules(axis_rules):
    state = run.init_state(jax.random.key(args.seed), encoder)
    params = jax.device_get(state.params)
    head = {'task': spec.name, 'num_labels': spec.num_labels,
            'is_regression': spec.is_regression, 'labels': list(spec.label_names)}
    init_dir = os.path.join(args.out, 'init')
    convert_hf.write_hf_dir(init_dir, model_cfg, unstack_layers({'bert': params['bert']}),
                            head=head, head_params=params['classifier'])
    hf_tokenizer.write_hf_tokenizer(init_dir, pretrained.tokenizer,
                                  model_cfg.max_position_embeddings)
    _, schedule = optim_lib.make_optimizer(config.optim, run.total_steps)
    losses, orders = [], []
    n = len(run.train)
    for epoch in range(1, args.epochs + 1):
      orders.append(engine.epoch_order(n, args.seed, epoch))
      state, epoch_losses = engine.fit_epoch(
          run.step_fn, state, run.train.arrays(), batch_size=config.batch_size, seed=args.seed,
          epoch=epoch, mesh=mesh, process=run.process)
      epoch_losses = [float(x) for x in jax.device_get(epoch_losses)]
      losses += epoch_losses
      print(f'{spec.name} epoch {epoch}: mean train loss {np.mean(epoch_losses):.6f}', flush=True)
    dev_split = spec.dev_splits[0]
    dev = run.features[dev_split]
    logits = run.predict(state.params, dev)
  lrs = np.asarray([float(schedule(s)) for s in range(run.total_steps)], np.float64)
  score = float(np.mean(np.argmax(logits, -1) == dev.labels))
  np.savez(os.path.join(args.out, 'sharedbert.npz'),
           train_ids=run.train.input_ids, train_segments=run.train.segment_ids,
           train_lengths=run.train.lengths, train_labels=run.train.labels,
           dev_ids=dev.input_ids, dev_lengths=dev.lengths, dev_labels=dev.labels,
           orders=np.stack(orders), losses=np.asarray(losses), lrs=lrs, dev_logits=logits)
  settings = dict(vars(args), total_steps=run.total_steps, num_train=n,
                  warmup_steps=optim_lib.with_warmup_steps(config.optim,
                                                           run.total_steps).warmup_steps,
                  dev_split=dev_split, dev_accuracy=score)
  with open(os.path.join(args.out, 'sharedbert.json'), 'w') as f:
    json.dump(settings, f, indent=1)
  print(json.dumps(settings, indent=1))


if __name__ == '__main__':
  main()
