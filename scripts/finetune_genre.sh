#!/usr/bin/env bash
# Genre classification (the 15 Brown categories, chunks of up to 128 word pieces) on the Brown
# documents held out from pretraining, from a pretrained model and from random weights, each at
# the learning rate that suits it on a validation split of the training documents, against the
# majority class: scripts/finetune_fair.sh genre.
#   scripts/finetune_genre.sh MODEL_DIR [OUT]    (after scripts/demo.sh: MODEL_DIR=out/bert-mini-brown)
exec "$(dirname "$0")/finetune_fair.sh" genre "$@"
