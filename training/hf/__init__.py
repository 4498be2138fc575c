"""Hugging Face causal-LM fine-tuning pieces (``training.hf_sft`` and the voice-clone pipeline's steps use them).

``model``: tokenizers and models by reference (hub id, folder, ``s3://``, ``tiny:*``); ``data``: the SFT set and its
encoding (loss on the completion only); ``steps``: token-level epochs with exact metrics; ``checkpoint``:
``save_pretrained`` checkpoints that resume; ``worker``: the Ray Train worker loop.
"""
