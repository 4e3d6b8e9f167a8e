"""sharedbert: BERT pretraining with shared query-key-value attention weights (JAX/Flax)."""

from setuptools import find_packages, setup

setup(
    name='sharedbert',
    version='0.1.0',
    description='Pretrain, compare and fine-tune BERT encoders whose attention shares '
                'weights between queries, keys and values (JAX/Flax).',
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    python_requires='>=3.10',
    packages=find_packages(include=['sharedbert', 'sharedbert.*']),
    # The PyTorch code a custom-code export ships beside its weights (not imported here).
    package_data={'sharedbert.convert': ['remote_code/*.py']},
    install_requires=[
        'jax>=0.7,<0.13',
        'flax>=0.12,<0.13',
        'optax>=0.2.4,<0.3',
        'orbax-checkpoint>=0.12,<0.13',
        'tensorflow-cpu>=2.17,<2.22',  # Input pipelines and TensorBoard summaries only.
        'tensorboard>=2.17,<2.22',
        'tensorflow-datasets>=4.9.7,<4.10',
        'sentencepiece>=0.2,<0.3',
        # WordPiece vocabularies of imported Hugging Face BERTs; tokenizer.json on export.
        'tokenizers>=0.20,<0.24',
        'ml-collections>=1.0,<2',
        'absl-py>=2.1,<3',
        'numpy>=1.26,<3',
        'scipy>=1.11,<2',
        'matplotlib>=3.8,<4',
        'safetensors>=0.4,<1',  # Hugging Face checkpoints (sharedbert.convert.hf); numpy API only.
    ],
    extras_require={
        'test': ['pytest>=8,<10', 'pytest-xdist>=3.5,<4',
                 'safetensors>=0.4,<1'],
        'tpu': ['jax[tpu]>=0.7,<0.13'],
        'cuda': ['jax[cuda12]>=0.7,<0.13'],
        # Hugging Face peer for benchmarks and checkpoint conversion; never a test dependency.
        # accelerate: transformers' Trainer (fine-tuning an export) needs it.
        'bench': ['torch>=2.4', 'transformers>=4.40', 'accelerate>=0.26', 'safetensors>=0.4,<1'],
        'hf': ['safetensors>=0.4,<1'],
    },
    entry_points={'console_scripts': ['sharedbert=sharedbert.cli:command']},
)
