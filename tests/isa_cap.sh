# Sourced by the tests that rerun at a lower ISA level (tests/run_at_isa.sh,
# labs/common/check_page.sh): isa_cap BERTLAB CAP WHAT caps oneDNN and bertlab's kernels at CAP
# (ONEDNN_MAX_CPU_ISA), or skips the test (exit 77) when this CPU lacks CAP or CAP is its own
# level, which WHAT (the uncapped run) covers.
isa_cap() {
  local bertlab="$1" cap="$2" what="$3" caps own
  caps="$(env -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA "$bertlab" isa --caps)"
  if ! grep -qx "$cap" <<<"$caps"; then
    echo "skipped: this CPU has no $cap (it accepts: $(echo $caps))"
    exit 77
  fi
  # The CPU's own level: the highest cap before ALL.
  own="$(grep -vx ALL <<<"$caps" | tail -n1)"
  if [ "$cap" = "$own" ]; then
    echo "skipped: $cap is this CPU's own level, which $what runs"
    exit 77
  fi
  export ONEDNN_MAX_CPU_ISA="$cap"
}
