# Lab 6 (labs/tokenize/README.md). --quick trains its vocabularies on the test fixture corpus.
bertlab_add_lab(tokenize LIBS bertlab_data CLI11::CLI11 TEST_ARGS --quick)
# Planted bugs (tests/labs/tokenize_planted.cpp): each must fail its check, naming the word, without
# the answer to the handout's step 3 questions (bertlab's pieces of those words).
bertlab_add_planted_bug(tokenize backtracks "hand-made words" FORBID "bertlab gives" EXPECT "word \"abcde\"")
bertlab_add_planted_bug(tokenize limit_counts_bytes "hand-made words" FORBID "bertlab gives \\[\"\\[UNK\\]\"\\]"
                        EXPECT "120 bytes")
bertlab_add_planted_bug(tokenize empty_word_crashes "hand-made words" FORBID "bertlab gives"
                        EXPECT "crashed with signal .* while working on word \"\" \\(the empty word\\)")
bertlab_add_planted_bug(tokenize cache_across_vocabularies "tokens per word" EXPECT "word \".*alphabet limit")
