"""Where hf-textdp meets the rest of the Hugging Face ecosystem: ``PrivateTokenizer``, the training collators,
the Hub push and the cards it renders."""
