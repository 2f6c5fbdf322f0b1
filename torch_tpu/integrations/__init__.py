"""Integrations with libraries that pick a device themselves (Hugging Face Accelerate).

Kept deliberately narrow: each module here uses a configuration knob the library
documents, never a patch of its code. See docs/huggingface.md.
"""
