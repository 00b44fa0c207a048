# Lab 3 (labs/arrangement/README.md). The grader runs the accelerator model (hwmodel/): the
# layout, the exact trace simulator and the analytic model behind `bertlab estimate`.
#
# The run on the stubs must not show the full model's speedup at S = 8, one core (step 8's
# answer, drawn only once the step-8 predictions are right): read here from the table the grader
# reads (docs/hwmodel-paper-table-estimate.md, its "speedup graph" column), independently of it;
# nor the sweep's speedups (steps 6 and 7's answers, drawn once step 7's guesses are written).
set(paper_doc ${PROJECT_SOURCE_DIR}/docs/hwmodel-paper-table-estimate.md)
set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${paper_doc})
file(STRINGS ${paper_doc} paper_header REGEX "^\\| S \\| cores \\|")
file(STRINGS ${paper_doc} paper_row REGEX "^\\| 8 \\| 1 \\|")
string(REPLACE "|" ";" paper_header "${paper_header}")
string(REPLACE "|" ";" paper_row "${paper_row}")
list(TRANSFORM paper_header STRIP)
list(TRANSFORM paper_row STRIP)
list(FIND paper_header "speedup graph" paper_column)
if(paper_column LESS 0)
  message(FATAL_ERROR "${paper_doc}: no 'speedup graph' column under its '| S | cores |' header")
endif()
list(GET paper_row ${paper_column} paper_speedup)  # e.g. 2.71x
if(NOT paper_speedup MATCHES "^([0-9]+)\\.([0-9]+)x$")
  message(FATAL_ERROR "${paper_doc}: the S = 8, 1 core row's 'speedup graph' is '${paper_speedup}', not N.NNx")
endif()
# The number wherever it starts (not the tail of a longer one), as printed or in a table.
set(paper_forbid "(^|[^0-9.])${CMAKE_MATCH_1}\\.${CMAKE_MATCH_2}")
bertlab_add_lab(arrangement LIBS bertlab_hwmodel bertlab_runtime CLI11::CLI11 TEST_ARGS --quick
                STUB_FORBID "${paper_forbid}|S=[0-9]+ P=[0-9]+: [0-9]|layer speedup of BWMA over RWMA")
# Planted bugs (tests/labs/arrangement_planted.cpp): each must fail its check, without the answer
# (the simulator's counts, the right offset, the [INFO] line with the too-small LLC's counts, or
# the full model's speedup).
bertlab_add_planted_bug(arrangement bwma_last_panel_unpadded "BWMA offsets" FORBID "expected")
bertlab_add_planted_bug(arrangement rwma_rows_share_lines "lines of one array step" FORBID "simulator counts|A 24, W 8, Y 24")
bertlab_add_planted_bug(arrangement small_llc_keeps_a "BWMA DRAM reads of a whole GEMM, LLC too small"
                        FORBID "simulator counts|A 8192|LLC too small to keep A: [^s]")
bertlab_add_planted_bug(arrangement full_model_l1_most "your predictions for the full model"
                        FORBID "${paper_forbid}|page walks change|full model, paper system")
