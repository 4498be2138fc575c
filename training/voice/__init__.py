"""The voice-cloning project's stages in miniature (issue 14): process → encode → (train: training.hf_sft) → evaluate.

Each stage is a thin entrypoint (``python -m training.voice.process`` ...) over small modules: audio I/O and clip
splitting (audio.py), the offline synthetic speech set (synthetic.py), features and Griffin-Lim (features.py), the
audio codecs (codec.py), the SFT text format (sft.py), scoring (scoring.py) and storage paths (store.py).
"""
