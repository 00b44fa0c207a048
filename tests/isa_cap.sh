# Sourced by the tests that rerun at a lower ISA level (tests/run_at_isa.sh,
# labs/common/check_page.sh) and by scripts/lab_ranges.sh: where this CPU stands to a cap, in one
# place.
#
# isa_sensitive_tests: the Catch test spec of the ISA-sensitive tests (tests/run_at_isa.sh,
# scripts/check_avx2_emulated.sh): everything but the tests of pure models, data preparation,
# reports and tools, which run no kernel (a new test is ISA-sensitive unless its tag is listed
# here), and the hidden tests (the slow reference checks), which stay out as in the rest of the
# suite.
isa_sensitive_tests() {
  local t spec="~[.]"
  for t in "[hwmodel]" "[hwmodel-reference]" "[hwmodel_cpu]" "[arrangement]" "[cluster]" "[alignment]" "[data]" \
    "[tokenizer]" "[vocab]" "[prepare]" "[brown]" "[fuzz]" "[labs]" "[html]" "[chart]" "[graph]" "[config]" "[valgrind]"; do
    spec+="~$t"
  done
  echo "$spec"
}
# isa_own_level BERTLAB: this CPU's own level, the highest cap `bertlab isa --caps` accepts
# before ALL (what an uncapped run uses).
isa_own_level() {
  env -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA "$1" isa --caps | grep -vx ALL | tail -n1
}
# isa_level BERTLAB CAP: "missing" (this CPU lacks CAP), "own" (CAP is its own level: the
# uncapped run is that level) or "lower" (ONEDNN_MAX_CPU_ISA=CAP runs a lower level's code).
isa_level() {
  local caps
  caps="$(env -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA "$1" isa --caps)"
  if ! grep -qx "$2" <<<"$caps"; then
    echo missing
  elif [ "$2" = "$(grep -vx ALL <<<"$caps" | tail -n1)" ]; then
    echo own
  else
    echo lower
  fi
}
# isa_cap BERTLAB CAP WHAT caps oneDNN and bertlab's kernels at CAP (ONEDNN_MAX_CPU_ISA), or
# skips the test (exit 77) when this CPU lacks CAP or CAP is its own level, which WHAT (the
# uncapped run) covers.
isa_cap() {
  local bertlab="$1" cap="$2" what="$3"
  case "$(isa_level "$bertlab" "$cap")" in
    missing)
      echo "skipped: this CPU has no $cap (it accepts: $(env -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA "$bertlab" isa --caps | paste -sd' '))"
      exit 77 ;;
    own)
      echo "skipped: $cap is this CPU's own level, which $what runs"
      exit 77 ;;
    lower)
      export ONEDNN_MAX_CPU_ISA="$cap" ;;
  esac
}
