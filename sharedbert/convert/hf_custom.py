"""Every variant as custom code for transformers: a folder that
`AutoModelForMaskedLM.from_pretrained(dir, trust_remote_code=True)` loads.

The folder holds config.json (model_type "sharedbert", an `auto_map` naming the classes),
configuration_sharedbert.py and modeling_sharedbert.py (from remote_code/, PyTorch, torch and
transformers only), model.safetensors and a model card. The tensors keep sharedbert's
parameter paths and shapes (joined with '.', layers unstacked), so the map is the identity:
`tensors_from_params` and `params_from_tensors` are inverses, and an export, import and
export again writes identical tensors. `write_dir` writes such a folder (with the card
of `card_from_workdir`); sharedbert.convert.hf decides when (`needs_custom_code`) and reads
it back.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from sharedbert.errors import UserError
from sharedbert.models import attention as attention_lib
from sharedbert.models.bert import ModelConfig, position_embeddings_value

MODEL_TYPE = 'sharedbert'
CODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'remote_code')
CODE_FILES = ('configuration_sharedbert.py', 'modeling_sharedbert.py')
AUTO_MAP = {
    'AutoConfig': 'configuration_sharedbert.SharedBertConfig',
    'AutoModel': 'modeling_sharedbert.SharedBertModel',
    'AutoModelForMaskedLM': 'modeling_sharedbert.SharedBertForMaskedLM',
    'AutoModelForSequenceClassification': 'modeling_sharedbert.SharedBertForSequenceClassification',
}
# The variants the modeling file implements (its VARIANTS); a new one must be added there.
EXPORTABLE = ('standard', 'shared', 'shared_qk', 'symmetric', 'pairwise', 'partial_qk',
              'kv_shared', 'single', 'q_identity', 'masa')
# Variant settings config.json carries for every variant, with the defaults of
# configuration_sharedbert.py: those its PyTorch code reads, and those only a fresh model's
# initial values depend on (`sharedbert_init`).
REMOTE_SETTINGS = {'qk_shared_fraction': 0.5, 'masa_atoms': 4, 'masa_projections': 'qkvo'}
INIT_SETTINGS = {'diag_init': 1.0, 'diag_init_scheme': 'signs', 'pairwise_init_std': 1.0}
# Where each paper's definition is, for the model card.
SOURCES = {
    'standard': 'BERT (Devlin et al., arXiv 1810.04805)',
    'shared': 'Kowsher et al., arXiv 2412.00359',
    'shared_qk': 'sharedbert: Kowsher et al.\'s shared Q and K (arXiv 2412.00359), V its own',
    'symmetric': 'Courtois et al., arXiv 2406.06366',
    'pairwise': 'Courtois et al., arXiv 2406.06366',
    'partial_qk': 'Yang et al., ENLSP 2024',
    'kv_shared': 'Kayyam et al., arXiv 2606.04032 ("Q-K=V")',
    'single': 'Kayyam et al., arXiv 2606.04032 ("Q=K=V")',
    'q_identity': 'Karbevski, arXiv 2510.23912 ("W_Q = I")',
    'masa': 'Zhussip et al., arXiv 2508.04581 (MASA)',
}


def code_digest() -> str:
  """sha256 of the two code files, in order: what the goldens were made with.

  Returns:
    The hex digest.
  """
  h = hashlib.sha256()
  for name in CODE_FILES:
    with open(os.path.join(CODE_DIR, name), 'rb') as f:
      h.update(f.read())
  return h.hexdigest()


def config_json(cfg: ModelConfig, head: dict | None = None,
                trained: dict | None = None) -> dict:
  """config.json of the folder: the model's settings under transformers' names, the
  variant's own, (with `head`, a fine-tuned classifier's description) its labels, and (with
  `trained`, `training_record`'s dict) how the weights were trained, so that an import and
  a later export describe the same run.

  Args:
    cfg: the model's ModelConfig.
    head: a classifier's description (num_labels, labels, is_regression, task, pooling).
    trained: how the weights were trained (training_record).
  Returns:
    The config.json dict.
  """
  if cfg.attention not in EXPORTABLE:
    raise UserError(f'the attention variant {cfg.attention!r} has no PyTorch code in '
                    'sharedbert/convert/remote_code/modeling_sharedbert.py; add it there first')
  out = {
      'model_type': MODEL_TYPE, 'auto_map': dict(AUTO_MAP),
      'architectures': ['SharedBertForSequenceClassification' if head else
                        'SharedBertForMaskedLM'],
      'attention_variant': cfg.attention, 'vocab_size': cfg.vocab_size,
      'hidden_size': cfg.hidden_size, 'num_hidden_layers': cfg.num_layers,
      'num_attention_heads': cfg.num_heads, 'intermediate_size': cfg.mlp_dim,
      'max_position_embeddings': cfg.max_position_embeddings,
      'type_vocab_size': cfg.type_vocab_size, 'hidden_dropout_prob': cfg.dropout_rate,
      'attention_probs_dropout_prob': cfg.attention_dropout_rate,
      'initializer_range': cfg.initializer_range, 'layer_norm_eps': cfg.layer_norm_eps,
      'pre_layer_norm': cfg.pre_layer_norm, 'causal': cfg.causal,
      'position_embeddings': cfg.position_embeddings, 'rope_theta': cfg.rope_theta,
      'rope_query_phase': cfg.rope_query_phase, 'pooling': 'cls',
      'pad_token_id': 0, 'torch_dtype': 'float32',
  }
  # The settings the PyTorch code reads, for every variant (the configuration class's
  # defaults where the variant has none of them); masa's atoms at their effective value
  # (0 means ceil(L/3)).
  resolved = attention_lib.VARIANTS[cfg.attention].resolved_settings(cfg.to_dict())
  for key, default in REMOTE_SETTINGS.items():
    out[key] = resolved.get(key, getattr(cfg, key, default))
  # Unused by the code; kept so that the diagonals' and P's initial values (a fresh
  # model's, before from_pretrained loads the weights) are the import's too.
  out['sharedbert_init'] = {key: getattr(cfg, key, default)
                            for key, default in INIT_SETTINGS.items()}
  if trained:
    out['sharedbert_trained'] = dict(trained)
  if head is not None:
    num_labels = int(head['num_labels'])
    names = list(head.get('labels') or [])
    if head.get('is_regression') or len(names) != num_labels:
      names = [f'LABEL_{i}' for i in range(num_labels)]
    out.update(num_labels=num_labels, pooling=head.get('pooling', 'cls'),
               id2label={str(i): n for i, n in enumerate(names)},
               label2id={n: i for i, n in enumerate(names)},
               problem_type=('regression' if head.get('is_regression')
                             else 'single_label_classification'),
               finetuning_task=head.get('task'))
  return out


def model_config_from_json(hf: dict, where: str = 'config.json') -> ModelConfig:
  """The ModelConfig of a custom-code folder's config.json (the inverse of config_json).

  Args:
    hf: the parsed config.json.
    where: how errors name the file.
  Returns:
    The ModelConfig, with the variant's own settings (the others are dropped).
  Raises:
    UserError: not a sharedbert folder, a missing key or a value out of range.
  """
  if hf.get('model_type') != MODEL_TYPE:
    raise UserError(f'{where}: model_type is {hf.get("model_type")!r}, not {MODEL_TYPE!r}')
  init = hf.get('sharedbert_init') or {}
  try:
    values = dict(
        attention=str(hf['attention_variant']),
        vocab_size=int(hf['vocab_size']),
        hidden_size=int(hf['hidden_size']), num_layers=int(hf['num_hidden_layers']),
        num_heads=int(hf['num_attention_heads']), mlp_dim=int(hf['intermediate_size']),
        max_position_embeddings=int(hf['max_position_embeddings']),
        type_vocab_size=int(hf['type_vocab_size']),
        dropout_rate=float(hf['hidden_dropout_prob']),
        attention_dropout_rate=float(hf['attention_probs_dropout_prob']),
        initializer_range=float(hf['initializer_range']),
        layer_norm_eps=float(hf['layer_norm_eps']), pre_layer_norm=bool(hf['pre_layer_norm']),
        causal=bool(hf['causal']),
        # Folders written before rotary existed say true/false.
        position_embeddings=position_embeddings_value(hf['position_embeddings']),
        rope_theta=float(hf.get('rope_theta', 10000.0)),
        rope_query_phase=float(hf.get('rope_query_phase', 0.0)),
        qk_shared_fraction=float(hf['qk_shared_fraction']), masa_atoms=int(hf['masa_atoms']),
        masa_projections=str(hf['masa_projections']),
        **{k: init[k] for k in INIT_SETTINGS if k in init})
  except KeyError as e:
    raise UserError(f'{where} has no {e.args[0]!r}; was it written by sharedbert\'s '
                    'export?') from e
  except (TypeError, ValueError) as e:
    raise UserError(f'{where}: a setting has the wrong type ({e})') from e
  try:  # Keeps the variant's own settings, drops the others (written for every variant).
    return ModelConfig.from_config(values)
  except UserError as e:
    raise UserError(f'{where}: {e}') from e


def tensors_from_params(params: dict[str, Any], prefix: str = '') -> dict[str, np.ndarray]:
  """A nested parameter tree -> {'a.b.c': float32 array} (the names of modeling_sharedbert).

  Args:
    params: a nested tree.
    prefix: the names' prefix.
  Returns:
    {'a.b.c': float32 array}.
  """
  out = {}
  for key, value in params.items():
    name = f'{prefix}{key}'
    if isinstance(value, dict):
      out.update(tensors_from_params(value, name + '.'))
    else:
      out[name] = np.ascontiguousarray(np.asarray(value, np.float32))
  return out


def params_from_tensors(tensors: dict[str, np.ndarray]) -> dict[str, Any]:
  """The inverse of tensors_from_params.

  Args:
    tensors: {'a.b.c': array}.
  Returns:
    The nested tree.
  """
  out: dict[str, Any] = {}
  for name, value in tensors.items():
    node = out
    *parents, leaf = name.split('.')
    for p in parents:
      node = node.setdefault(p, {})
    node[leaf] = np.asarray(value)
  return out


def check_tensors(tensors: dict[str, np.ndarray], expected: dict[str, Any], where: str):
  """Refuses tensors whose names or shapes differ from the model's (an edited folder).

  Args:
    tensors: the folder's.
    expected: the model's tree (arrays or shapes).
    where: how the refusal names the folder.
  Raises:
    UserError: a missing, unexpected or reshaped tensor.
  Returns:
    None.
  """
  want = {k: tuple(np.shape(v)) for k, v in tensors_from_params(expected).items()}
  have = {k: tuple(v.shape) for k, v in tensors.items()}
  missing, extra = sorted(set(want) - set(have)), sorted(set(have) - set(want))
  if missing or extra:
    raise UserError(f'{where}: the tensors do not match the config ({len(missing)} missing, '
                    f'e.g. {missing[:2]}; {len(extra)} unexpected, e.g. {extra[:2]})')
  wrong = [k for k in want if want[k] != have[k]]
  if wrong:
    raise UserError(f'{where}: {wrong[0]} has shape {have[wrong[0]]}, the config says '
                    f'{want[wrong[0]]}')


def attention_parameters(params: dict[str, Any]) -> int:
  """Parameters of the attention sublayers (layers' `attention` and the cross-layer
  dictionary), the card's figure.

  Args:
    params: the pretraining tree.
  Returns:
    The count.
  """
  total = 0
  for name, value in tensors_from_params(params).items():
    if '.attention.' in f'.{name}' or 'shared_attention' in name:
      total += int(np.size(value))
  return total


def model_card(cfg: ModelConfig, params: dict[str, Any], *, step: int, recipe: dict,
               mlm_accuracy: float | None, head: dict | None) -> str:
  """README.md of the folder: what the model is, how it was trained, how to load it.

  Args:
    cfg: the ModelConfig.
    params: the exported tree.
    step: the checkpoint's step.
    recipe: training_record's recipe.
    mlm_accuracy: held-out MLM accuracy, or None.
    head: a classifier's description, or None.
  Returns:
    The README text.
  """
  variant = attention_lib.VARIANTS[cfg.attention]
  total = sum(int(np.size(v)) for v in tensors_from_params(params).values())
  auto = 'AutoModelForSequenceClassification' if head else 'AutoModelForMaskedLM'
  lines = [
      '---', 'library_name: transformers', 'tags: [sharedbert, bert, custom_code]', '---', '',
      f'# A sharedbert encoder: `{cfg.attention}` attention', '',
      f'{(variant.__doc__ or "").strip().splitlines()[0]} Source: {SOURCES[cfg.attention]}.',
      '',
      f'- {cfg.num_layers} layers, width {cfg.hidden_size}, {cfg.num_heads} heads, FFN '
      f'{cfg.mlp_dim}, {"pre" if cfg.pre_layer_norm else "post"}-LayerNorm'
      + (', causal' if cfg.causal else '') +
      {'learned': '', 'none': ', no position embeddings',
       'rotary': f', rotary positions (theta {cfg.rope_theta:g}'
                 + (f', query phase {cfg.rope_query_phase:g}' if cfg.rope_query_phase else '')
                 + ')'}[cfg.position_embeddings],
      f'- parameters: {total:,} in all, {attention_parameters(params):,} in attention',
      f'- trained: step {step}'
      + (f' of {recipe["total_steps"]:,}, batch {recipe["batch_size"]} x {recipe["seq_len"]} '
         f'tokens, peak learning rate {recipe["lr"]:g}' if recipe else ''),
      f'- held-out MLM accuracy: {mlm_accuracy:.4f}' if mlm_accuracy is not None else
      '- held-out MLM accuracy: not recorded with this checkpoint',
  ]
  if head:
    lines.append(f'- fine-tuned on {head.get("task")} ({head.get("num_labels")} '
                 f'{"output, regression" if head.get("is_regression") else "labels"}; '
                 f'pooling {head.get("pooling", "cls")})')
  lines += [
      '', 'The modeling code is in this folder (`modeling_sharedbert.py`, PyTorch), so loading '
      'needs `trust_remote_code=True`, for the tokenizer too (transformers reads the model\'s '
      'config to choose a tokenizer, and asks before running its code):', '', '```python',
      f'from transformers import AutoTokenizer, {auto}',
      'tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)',
      f'model = {auto}.from_pretrained(path, trust_remote_code=True)', '```', '',
      'Written by `sharedbert convert_hf export`; `sharedbert convert_hf import` reads it back.',
      '']
  return '\n'.join(lines)


def needs_custom_code(cfg: ModelConfig, head: dict | None = None) -> bool:
  """Whether no transformers architecture computes this model: any variant but standard, a
  causal mask, no positions, rotary positions that RoFormer does not compute (pre-LN, another
  theta, a query phase, or a classifier: RoFormer's head is not BERT's pooler), or a
  classifier on the mean of the tokens.

  Args:
    cfg: the ModelConfig.
    head: a classifier's description, or None.
  Returns:
    Whether the custom code is needed.
  """
  roformer = (cfg.position_embeddings == 'rotary' and not cfg.pre_layer_norm
              and cfg.rope_theta == 10000.0 and not cfg.rope_query_phase and head is None)
  return (cfg.attention != 'standard' or cfg.causal or cfg.position_embeddings == 'none'
          or (cfg.position_embeddings == 'rotary' and not roformer)
          or (head is not None and head.get('pooling', 'cls') != 'cls'))


def write_dir(hf_dir: str, cfg: ModelConfig, params: dict[str, Any], *, head: dict | None,
              head_params: dict[str, Any] | None, card: str, trained: dict | None = None):
  """config.json, the two code files, model.safetensors (sharedbert's names) and README.md.

  Args:
    hf_dir: the folder.
    cfg: the ModelConfig.
    params: the pretraining tree.
    head: a classifier's description, or None.
    head_params: its params.
    card: README.md's text.
    trained: training_record's dict, or None.
  Returns:
    None.
  """
  tree = dict(params)
  if head is not None:
    tree['classifier'] = head_params
  os.makedirs(hf_dir, exist_ok=True)
  with open(os.path.join(hf_dir, 'config.json'), 'w', encoding='utf-8') as f:
    json.dump(config_json(cfg, head, trained), f, indent=2, sort_keys=True)
    f.write('\n')
  for name in CODE_FILES:
    shutil.copyfile(os.path.join(CODE_DIR, name), os.path.join(hf_dir, name))
  save_file(tensors_from_params(tree), os.path.join(hf_dir, 'model.safetensors'),
            metadata={'format': 'pt'})
  with open(os.path.join(hf_dir, 'README.md'), 'w', encoding='utf-8') as f:
    f.write(card)


def training_record(workdir: str, step: int, head=None) -> dict:
  """How the checkpoint at `step` of `workdir` was trained: {'step', 'recipe' (total_steps,
  batch_size, seq_len, lr; {} when unknown), 'mlm_accuracy' (or None)}. A workdir imported
  from an export (and not trained since) reports the record the export carried, not the
  import's default recipe.

  Args:
    workdir: the run.
    step: the checkpoint's step.
    head: a classifier's description (its run's recipe), or None.
  Returns:
    The record.
  """
  recipe, accuracy, c = {}, None, {}
  pretrain_dir = head['init_from'] if head and head.get('init_from') else workdir
  try:  # What the workdir recorded, when it can be read: the card is written without it.
    with open(os.path.join(pretrain_dir, 'config.json'), encoding='utf-8') as f:
      c = json.load(f)
    recipe = {'total_steps': int(c['total_steps']), 'batch_size': int(c['data']['batch_size']),
              'seq_len': int(c['data']['seq_len']), 'lr': float(c['optim']['lr'])}
  except (OSError, KeyError, TypeError, ValueError):
    pass
  imported = c.get('imported_training') if isinstance(c, dict) else None
  if imported and (step == 0 or head):
    return dict(imported)
  try:
    with open(os.path.join(pretrain_dir, 'summary.json'), encoding='utf-8') as f:
      accuracy = float(json.load(f).get('eval_mlm_accuracy'))
  except (OSError, AttributeError, TypeError, ValueError):
    accuracy = None
  return {'step': step, 'recipe': recipe, 'mlm_accuracy': accuracy}


def card_from_workdir(workdir: str, cfg: ModelConfig, params: dict[str, Any], step: int, head,
                      head_params) -> str:
  """The model card, with the recipe and held-out accuracy the workdir recorded.

  Args:
    workdir: the run.
    cfg: the ModelConfig.
    params: the exported tree.
    step: the checkpoint's step.
    head: a classifier's description, or None.
    head_params: its params.
  Returns:
    The README text.
  """
  record = training_record(workdir, step, head)
  tree = dict(params) if head is None else {**params, 'classifier': head_params}
  return model_card(cfg, tree, step=step if head else record['step'], recipe=record['recipe'],
                    mlm_accuracy=record['mlm_accuracy'], head=head)
