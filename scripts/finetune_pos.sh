#!/usr/bin/env bash
# Part-of-speech tagging on the Brown documents held out from pretraining, from a pretrained
# model and from random weights, each at the learning rate that suits it on a validation split
# of the training documents, against the most-frequent-tag baseline: scripts/finetune_fair.sh pos.
#   scripts/finetune_pos.sh MODEL_DIR [OUT]    (after scripts/demo.sh: MODEL_DIR=out/bert-mini-brown)
exec "$(dirname "$0")/finetune_fair.sh" pos "$@"
