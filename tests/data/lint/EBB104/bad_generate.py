import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("gpt2")
lm = AutoModelForCausalLM.from_pretrained("gpt2").to("cuda")


def serve(prompts: list[str]) -> list[str]:
    out = []
    while prompts:
        batch = tok(prompts[:8], return_tensors="pt").to("cuda")
        out += tok.batch_decode(lm.generate(**batch, max_new_tokens=32))
        prompts = prompts[8:]
    return out


@torch.inference_mode()
def score(batches: list[torch.Tensor]) -> list[torch.Tensor]:
    results = []
    for batch in batches:
        for _ in range(4):
            results.append(lm(batch).logits)
    return results
