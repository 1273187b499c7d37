"""Tiny random masked LMs built in the tests: BERT with a WordPiece tokenizer, RoBERTa with byte-level BPE."""

from __future__ import annotations

from pathlib import Path

from tests.utils import corpus


def build_tiny_bert_mlm(folder: Path, vocab_size: int = 600, hidden: int = 16, seed: int = 0) -> Path:
    """A WordPiece tokenizer trained on test text and a random BertForMaskedLM ([CLS] $A [SEP], [MASK])."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    )
    tok.train_from_iterator(corpus(1500, seed), trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]",
    )  # fmt: skip
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(fast), hidden_size=hidden, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=64, pad_token_id=fast.pad_token_id,
    )  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    BertForMaskedLM(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def build_tiny_roberta_mlm(folder: Path, vocab_size: int = 500, hidden: int = 16, seed: int = 1) -> Path:
    """A byte-level BPE tokenizer trained on test text and a random RobertaForMaskedLM (<s> $A </s>, <mask>)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, RobertaConfig, RobertaForMaskedLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(1500, seed), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
        cls_token="<s>", sep_token="</s>", mask_token="<mask>",
    )  # fmt: skip
    torch.manual_seed(seed)
    config = RobertaConfig(
        vocab_size=len(fast), hidden_size=hidden, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=66, pad_token_id=1, bos_token_id=0, eos_token_id=2,
    )  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    RobertaForMaskedLM(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder
