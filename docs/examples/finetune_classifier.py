"""Fine-tune a sequence classifier on a CSV (columns text,label) and classify new texts.

usage: python3 finetune_classifier.py MODEL_DIR TRAIN.csv EVAL.csv OUT_DIR [STEPS]
"""
import json
import sys

import bertlab

model_dir, train_csv, eval_csv, out = sys.argv[1:5]
steps = int(sys.argv[5]) if len(sys.argv) > 5 else 300
result = bertlab.finetune(task="seq-cls", model=model_dir, train=train_csv, eval=eval_csv, out=out, overwrite=True,
                          max_steps=steps, batch_size=8, learning_rate=1e-4, log_steps=max(1, steps // 5),
                          callback=lambda r: print(f"step {r['step']}: loss {r['loss']:.4f}  acc {r['accuracy']:.3f}"))
print(f"eval accuracy {result['eval_results']['eval_accuracy']:.3f}")
tokenizer, model = bertlab.Tokenizer.from_pretrained(out), bertlab.Model.from_pretrained(out)
id2label = json.load(open(f"{out}/config.json"))["id2label"]
texts = ["the lazy dog jumps", "hello world"]
logits = model(**tokenizer(texts, padding=True, return_tensors="np")).logits
for text, row in zip(texts, logits):
    print(f"{text!r}: {id2label[str(row.argmax())]}")
