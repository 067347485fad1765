"""GPU profiles (profiles/gpus/*.yaml) and their loader (pdmux_cli.catalog.hardware).

Literal figures are from shared/reference/gpu-specs.md.
"""

from __future__ import annotations

import pytest

from pdmux_cli.catalog import hardware
from pdmux_cli.util.errors import InputError
from pdmux_cli.catalog.hardware import Gpu, find_gpu, load_gpu_file, load_gpus, normalize_gpu_name
from pdmux_cli.catalog.profile_files import gpu_profiles_dir

VALID_PROFILE = """\
name: Test GPU
aliases: [testgpu]
sm_count: 100
compute_capability: "9.0"
memory_bytes: 80000000000
hbm_bytes_per_s: 3000000000000
bf16_dense_flops: 500000000000000
fp16_dense_flops: 500000000000000
fp8_dense_flops: null
l2_bytes: 52428800
source: unit test
"""


# ------------------------------------------------------------------------------------------------
# Every built-in profile
# ------------------------------------------------------------------------------------------------


def test_every_profile_file_loads():
    files = sorted(gpu_profiles_dir().glob("*.yaml"))
    gpus = load_gpus()
    assert [g.key for g in gpus] == [p.stem for p in files]
    assert len(gpus) >= 29
    for path in files:
        gpu = load_gpu_file(path)
        assert isinstance(gpu, Gpu)
        assert gpu.key == path.stem


def test_load_gpus_is_sorted_and_cached():
    gpus = load_gpus()
    assert [g.key for g in gpus] == sorted(g.key for g in gpus)
    assert load_gpus() is gpus


@pytest.mark.parametrize("gpu", load_gpus(), ids=lambda g: g.key)
def test_profile_is_well_formed(gpu: Gpu):
    assert gpu.key == gpu.key.lower() and " " not in gpu.key and "_" not in gpu.key
    assert gpu.name and gpu.source
    assert gpu.memory_note, "say whether memory is device-reported or marketing"
    if gpu.sm_count is None:
        assert "SM count" in gpu.note or "SMs" in gpu.note
    else:
        assert 20 <= gpu.sm_count <= 200
    assert gpu.compute_capability[0] in (7, 8, 9, 10, 12)
    assert 10 * 10**9 < gpu.memory_bytes < 400 * 10**9
    assert 10**11 < gpu.hbm_bytes_per_s < 10**13
    assert gpu.bf16_dense_flops is not None or gpu.fp16_dense_flops is not None
    assert gpu.dense_flops("bf16") > 0
    if gpu.l2_bytes is not None:
        assert 1 << 20 <= gpu.l2_bytes <= 256 << 20


@pytest.mark.parametrize("gpu", load_gpus(), ids=lambda g: g.key)
def test_no_sparse_figures(gpu: Gpu):
    """NVIDIA datasheets print 2:4-sparse numbers; profiles store dense ones."""
    for value in (gpu.bf16_dense_flops, gpu.fp16_dense_flops):
        if value is not None:
            assert value < 3e15
    if gpu.bf16_dense_flops is not None and gpu.fp8_dense_flops is not None:
        assert gpu.fp8_dense_flops / gpu.bf16_dense_flops == pytest.approx(2.0, rel=0.05)
    if gpu.fp8_dense_flops is not None:
        assert gpu.fp8_dense_flops < 6e15


def test_aliases_unique_across_profiles():
    owner: dict[str, str] = {}
    for gpu in load_gpus():
        for label in (gpu.key, gpu.name, *gpu.aliases):
            norm = normalize_gpu_name(label)
            assert norm, label
            assert owner.setdefault(norm, gpu.key) == gpu.key, f"{label!r} in {gpu.key} and {owner[norm]}"


def test_every_variant_of_the_table_has_a_profile():
    keys = {g.key for g in load_gpus()}
    expected = {
        "h100-sxm",
        "h100-pcie",
        "h100-nvl",
        "h800-sxm",
        "h20",
        "h200-sxm",
        "h200-nvl",
        "gh200-96gb",
        "gh200-144gb",
        "a100-sxm-40gb",
        "a100-sxm-80gb",
        "a100-pcie-80gb",
        "a800-sxm-80gb",
        "a800-pcie-80gb",
        "a800-pcie-40gb",
        "a10",
        "a30",
        "l4",
        "l40",
        "l40s",
        "b200",
        "b100",
        "gb200",
        "b300",
        "gb300",
        "rtx-pro-6000",
        "rtx-5090",
        "rtx-4090",
        "rtx-3090",
        "v100-sxm2-16gb",
        "v100-sxm2-32gb",
        "t4",
    }
    assert expected <= keys


# ------------------------------------------------------------------------------------------------
# Literal figures
# ------------------------------------------------------------------------------------------------


def test_h100_figures():
    h100 = find_gpu("h100")
    assert h100.key == "h100-sxm"
    assert h100.sm_count == 132
    assert h100.compute_capability == (9, 0)
    assert h100.hbm_bytes_per_s == 3.35e12
    assert h100.bf16_dense_flops == 989e12
    assert h100.dense_flops() == 989e12
    assert h100.dense_flops("fp8") == 1979e12
    assert h100.memory_bytes == 81559 * 2**20
    assert h100.l2_bytes == 50 * 2**20


def test_other_figures():
    a100 = find_gpu("a100")
    assert (a100.sm_count, a100.compute_capability) == (108, (8, 0))
    assert a100.fp8_dense_flops is None
    assert find_gpu("h20").sm_count == 78
    assert find_gpu("h200").l2_bytes == 60 * 2**20
    b200 = find_gpu("b200")
    assert (b200.sm_count, b200.compute_capability) == (148, (10, 0))
    assert b200.hbm_bytes_per_s == 8.0e12
    assert "7.7" in b200.note
    assert find_gpu("h100-pcie").sm_count == 114
    assert find_gpu("gb200").sm_count == 152
    assert find_gpu("b300").compute_capability == (10, 3)
    assert find_gpu("rtx-pro-6000").compute_capability == (12, 0)
    assert find_gpu("l4").sm_count == 58
    assert find_gpu("t4").compute_capability == (7, 5)


def test_bf16_falls_back_to_fp16_without_bf16_tensor_cores():
    for name, fp16 in (("v100", 125e12), ("t4", 65e12)):
        gpu = find_gpu(name)
        assert gpu.bf16_dense_flops is None
        assert gpu.dense_flops("bf16") == gpu.dense_flops("fp16") == fp16
        with pytest.raises(InputError, match="fp8"):
            gpu.dense_flops("fp8")


def test_unknown_dtype():
    with pytest.raises(InputError, match="dtype"):
        find_gpu("h100").dense_flops("int4")


def test_b100_sm_count_unpublished():
    b100 = find_gpu("b100")
    assert b100.sm_count is None
    with pytest.raises(InputError, match=r"SM count is not published.*--sms N --cc 10\.0"):
        b100.require_sm_count()
    assert find_gpu("h100").require_sm_count() == 132


# ------------------------------------------------------------------------------------------------
# Lookup
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "key"),
    [
        ("h100", "h100-sxm"),
        ("H100", "h100-sxm"),
        ("h100-sxm", "h100-sxm"),
        ("H100 SXM", "h100-sxm"),
        ("h100_sxm", "h100-sxm"),
        ("H100 SXM5 80GB", "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("nvidia h100 80gb hbm3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
        ("a800", "a800-sxm-80gb"),
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA H20", "h20"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GH200 480GB", "gh200-96gb"),
        ("NVIDIA GH200 144G HBM3e", "gh200-144gb"),
        ("gh200", "gh200-96gb"),
        ("v100", "v100-sxm2-32gb"),
        ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
        ("Tesla T4", "t4"),
        ("4090", "rtx-4090"),
        ("RTX 4090", "rtx-4090"),
        ("rtx4090", "rtx-4090"),
        ("NVIDIA GeForce RTX 5090", "rtx-5090"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
        ("  L40S  ", "l40s"),
        ("NVIDIA B300 SXM6 AC", "b300"),
    ],
)
def test_find_gpu(query: str, key: str):
    assert find_gpu(query).key == key


def test_unknown_gpu_lists_close_matches():
    with pytest.raises(InputError) as info:
        find_gpu("h1000")
    message = str(info.value)
    assert "unknown GPU 'h1000'" in message
    assert "closest:" in message and "h100" in message
    assert "--all" in message


def test_unknown_gpu_without_close_match():
    with pytest.raises(InputError, match="unknown GPU"):
        find_gpu("zzzzqqq")
    with pytest.raises(InputError, match="unknown GPU"):
        find_gpu("NVIDIA")


def test_normalize_gpu_name():
    assert normalize_gpu_name("NVIDIA H100 80GB HBM3") == "h10080gbhbm3"
    assert normalize_gpu_name("h100_sxm") == normalize_gpu_name("H100 SXM") == normalize_gpu_name("h100-sxm")
    assert normalize_gpu_name("nvidia-a100") == "a100"


# ------------------------------------------------------------------------------------------------
# User files and custom GPUs
# ------------------------------------------------------------------------------------------------


def test_user_profile_loads(tmp_path):
    path = tmp_path / "my-gpu.yaml"
    path.write_text(VALID_PROFILE)
    gpu = load_gpu_file(path)
    assert gpu.key == "my-gpu"
    assert gpu.sm_count == 100 and gpu.compute_capability == (9, 0)
    assert gpu.hbm_bytes_per_s == 3e12 and gpu.fp8_dense_flops is None
    assert gpu.aliases == ("testgpu",)


def test_e_notation_text_is_read_as_a_number(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(VALID_PROFILE.replace("3000000000000", "3.0e12"))
    assert load_gpu_file(path).hbm_bytes_per_s == 3e12


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("sm_count: 100", "sm_count: lots", "sm_count"),
        ("sm_count: 100", "sm_count: 100.5", "sm_count"),
        ("sm_count: 100\n", "", "sm_count"),
        ("memory_bytes: 80000000000", "memory_bytes: -1", "memory_bytes"),
        ("hbm_bytes_per_s: 3000000000000", "hbm_bytes_per_s: fast", "hbm_bytes_per_s"),
        ("bf16_dense_flops: 500000000000000", "bf16_dense_flops: [1]", "bf16_dense_flops"),
        ('compute_capability: "9.0"', 'compute_capability: "nine"', "compute_capability"),
        ('compute_capability: "9.0"', "compute_capability: [9, 0]", "compute_capability"),
        ("aliases: [testgpu]", "aliases: testgpu", "aliases"),
        ("aliases: [testgpu]", "aliases: [4090]", "aliases"),
        ("name: Test GPU", "name: ''", "name"),
        ("source: unit test", "sorce: unit test", "sorce"),
        # implausible values: an int past float's range, more SMs than SGLang's partition search
        # should loop over, bytes/s written as TB/s, names that would drive the terminal
        ("memory_bytes: 80000000000", "memory_bytes: " + "9" * 400, "memory_bytes"),
        ("sm_count: 100", "sm_count: 100000", "from 1 to 1024"),
        ("sm_count: 100", "sm_count: 1e300", "sm_count"),
        ("hbm_bytes_per_s: 3000000000000", "hbm_bytes_per_s: 3", "from 1e+09"),
        ("bf16_dense_flops: 500000000000000", "bf16_dense_flops: 1e-300", "bf16_dense_flops"),
        ("name: Test GPU", 'name: "A\\e[31mRED"', "printable"),
        ("aliases: [testgpu]", 'aliases: ["\\u202eevil"]', "printable"),
    ],
)
def test_malformed_profile_names_file_and_field(tmp_path, old, new, field):
    assert old in VALID_PROFILE
    path = tmp_path / "bad.yaml"
    path.write_text(VALID_PROFILE.replace(old, new))
    with pytest.raises(InputError) as info:
        load_gpu_file(path)
    assert str(path) in str(info.value)
    assert field in str(info.value) and len(str(info.value)) < 400


def test_null_sm_count_needs_a_note(tmp_path):
    path = tmp_path / "nosm.yaml"
    path.write_text(VALID_PROFILE.replace("sm_count: 100", "sm_count: null"))
    with pytest.raises(InputError, match="sm_count"):
        load_gpu_file(path)
    path.write_text(VALID_PROFILE.replace("sm_count: 100", "sm_count: null") + "note: not published\n")
    with pytest.raises(InputError, match="not published"):
        load_gpu_file(path).require_sm_count()


def test_bad_yaml_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(InputError, match="missing.yaml: no such file"):
        load_gpu_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_gpu_file(bad)
    bad.write_text("- just\n- a list\n")
    with pytest.raises(InputError, match="mapping"):
        load_gpu_file(bad)


def test_duplicate_alias_across_profiles_is_rejected():
    a = Gpu("a", "A", ("x",), 10, (9, 0), 1, 1.0, None, 1.0, None, None, "s")
    b = Gpu("b", "B", ("X",), 10, (9, 0), 1, 1.0, None, 1.0, None, None, "s")
    with pytest.raises(InputError, match="unique"):
        hardware._index((a, b))


# ------------------------------------------------------------------------------------------------
# --gpu FILE.yaml: a profile of one's own, through the CLI
# ------------------------------------------------------------------------------------------------


def test_find_gpu_or_file(tmp_path):
    path = tmp_path / "my-gpu.yaml"
    path.write_text(VALID_PROFILE)
    assert hardware.find_gpu_or_file(str(path)).key == "my-gpu"
    assert hardware.find_gpu_or_file("h100").key == find_gpu("h100").key
    with pytest.raises(InputError, match="no such file"):
        hardware.find_gpu_or_file("missing-gpu.yaml")


def test_user_profile_field_written_twice(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text(VALID_PROFILE + "sm_count: 132\n")
    with pytest.raises(InputError, match="field 'sm_count' is written twice"):
        load_gpu_file(path)


def test_user_profile_through_the_cli(tmp_path):
    import json

    from cli_assertions import assert_one_line_error
    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    runner = CliRunner()
    path = tmp_path / "my-gpu.yaml"
    path.write_text(VALID_PROFILE)
    splits = runner.invoke(app, ["splits", "--gpu", str(path), "--json"])
    assert splits.exit_code == 0, splits.stderr
    data = json.loads(splits.stdout)
    assert data["gpu"] == "Test GPU" and data["sm_count"] == 100
    assert (data["groups"][0]["prefill_sms"], data["groups"][0]["decode_sms"]) == (100, 0)
    est = runner.invoke(app, ["estimate", "--gpu", str(path), "--json"])
    assert est.exit_code == 0, est.stderr
    assert json.loads(est.stdout)["gpu"] == "Test GPU"
    # gen-config must not write its YAML over the profile it read
    before = path.read_text()
    assert_one_line_error(runner.invoke(app, ["gen-config", "--gpu", str(path), "-o", str(path)]), 2,
                          "input file")
    assert path.read_text() == before


def test_error_lines_escape_control_characters(tmp_path):
    """A file name (or any text) with ESC in it reaches stderr escaped, not as a terminal command."""
    from typer.testing import CliRunner

    from pdmux_cli.cli import app

    r = CliRunner().invoke(app, ["splits", "--gpu", str(tmp_path / "x\x1b[31m.yaml")])
    assert r.exit_code == 2 and "\x1b" not in r.stderr and "x\\x1b[31m.yaml" in r.stderr
