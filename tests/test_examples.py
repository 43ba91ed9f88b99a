"""examples/mxnet_imagenet_resnet50.py at 2 ranks: RecordIO training with
validation, checkpoint and resume; synthetic smoke runs; --help."""
import os
import re
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

from mpi_harness import REPO, mpiexec_path, rank_env, run_command

EXAMPLE = os.path.join(REPO, "examples", "mxnet_imagenet_resnet50.py")
NUM_CLASSES = 4
# Dominant colour per class; every image adds noise and a random bright square.
CLASS_COLOURS = np.array([(200, 40, 40), (40, 200, 40), (40, 40, 200), (200, 200, 40)], dtype=np.float32)


def run_example(args, timeout=180, launcher=None):
    """Runs the example on 2 ranks in its own session; returns stdout + stderr."""
    launcher = launcher or [mpiexec_path(), "-n", "2"]
    cmd = launcher + [sys.executable, EXAMPLE, *map(str, args)]
    rc, out, err = run_command(cmd, timeout)
    assert rc == 0, f"exit {rc}: {' '.join(cmd)}\n{out}\n{err}"
    return out + err


# -- a tiny ImageNet-format data set ----------------------------------------------------

def encode_png(image):
    """RGB uint8 HxWx3 -> PNG bytes. The mxnet 1.9.1 wheel decodes images with
    its bundled OpenCV but exposes no encoder (mx.recordio.pack_img needs the
    cv2 module), so records hold PNGs written here; ImageRecordIter decodes
    them through the same cv::imdecode call it uses for JPEGs."""
    height, width, _ = image.shape
    rows = b"".join(b"\x00" + image[r].tobytes() for r in range(height))

    def chunk(kind, payload):
        return (struct.pack(">I", len(payload)) + kind + payload
                + struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def make_image(label, rng, side=36):
    image = CLASS_COLOURS[label] + rng.normal(0, 20, size=(side, side, 3))
    y, x = rng.integers(0, side - 8, size=2)
    image[y:y + 8, x:x + 8] = 255
    return np.clip(image, 0, 255).astype(np.uint8)


def write_record_file(prefix, count, seed):
    import mxnet as mx

    rng = np.random.default_rng(seed)
    record = mx.recordio.MXIndexedRecordIO(prefix + ".idx", prefix + ".rec", "w")
    for i in range(count):
        label = i % NUM_CLASSES
        header = mx.recordio.IRHeader(0, float(label), i, 0)
        record.write_idx(i, mx.recordio.pack(header, encode_png(make_image(label, rng))))
    record.close()
    return prefix + ".rec"


@pytest.fixture(scope="module")
def record_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagenet_rec")
    # 30 validation images: 15 per rank, so each rank's last batch of 8 is padded.
    return write_record_file(str(root / "train"), 64, seed=1), write_record_file(str(root / "val"), 30, seed=2)


def test_record_file_decodes(record_data):
    import mxnet as mx

    train_rec, _ = record_data
    record = mx.recordio.MXIndexedRecordIO(train_rec[:-4] + ".idx", train_rec, "r")
    header, payload = mx.recordio.unpack(record.read_idx(5))
    image = mx.image.imdecode(payload).asnumpy()  # RGB
    record.close()
    assert header.label == 5 % NUM_CLASSES and image.shape == (36, 36, 3)
    assert np.argmax(np.median(image.reshape(-1, 3), axis=0)) == 1  # class 1 is green


# -- the example ---------------------------------------------------------------------

def test_help_documents_every_option():
    result = subprocess.run([sys.executable, EXAMPLE, "--help"], capture_output=True, text=True, timeout=60,
                            env=rank_env(), cwd=REPO)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    for option in ("--use-rec", "--rec-train-idx", "--model", "--num-batches", "--lr-mode", "--lr-decay-epoch",
                   "--warmup-epochs", "--label-smoothing", "--gradient-predivide-factor", "--fp16-allreduce",
                   "--hybridize", "--eval-frequency", "--save-frequency", "--resume", "--verbose", "--seed"):
        assert option in text, option
    assert "/ 256" in text and "default resnet50_v1" in text


def test_record_training_checkpoints_and_resumes(record_data, tmp_path):
    train_rec, val_rec = record_data
    save_dir = tmp_path / "ckpt"
    common = ["--use-rec", "--rec-train", train_rec, "--rec-val", val_rec, "--model", "resnet18_v1",
              "--num-classes", NUM_CLASSES, "--image-size", 32, "--batch-size", 8, "--data-threads", 1,
              "--lr", 0.4, "--eval-frequency", 1, "--save-frequency", 1, "--save-dir", save_dir,
              "--log-interval", 2]

    first = run_example(common + ["--num-epochs", 1])
    # 64 images / (8 per rank * 2 ranks) = 4 steps per epoch.
    assert re.search(r"Epoch\[0\] Batch\[4\] loss=[\d.]+ train-acc=[\d.]+ lr=[\d.]+ img/s per rank=[\d.]+ "
                     r"total img/s=[\d.]+", first), first
    assert re.search(r"Epoch\[0\] done in [\d.]+s.*total img/s=", first), first
    # Every validation image counted once across ranks; the padding of the last batch is not.
    assert re.search(r"Epoch\[0\] Validation: top1-acc=[\d.]+ \(30 images", first), first
    assert "top5" not in first  # 4 classes: top-5 would always be 1
    assert "Initialised parameters" in first
    assert (save_dir / "resnet18_v1-0001.params").is_file() and (save_dir / "resnet18_v1-0001.states").is_file()
    assert not list(save_dir.glob("*.tmp"))

    second = run_example(common + ["--num-epochs", 2, "--resume", 1])
    assert "Initialised parameters" not in second, second
    assert "Resumed parameters from" in second
    # The optimizer comes back with its 4 updates (and momentum) from epoch 0.
    assert re.search(r"Loaded trainer states from .*resnet18_v1-0001\.states \(optimizer update count 4\); "
                     r"continuing at epoch 1", second), second
    assert "Epoch[0]" not in second
    assert re.search(r"Epoch\[1\] Batch\[4\] .*img/s per rank=", second), second
    assert re.search(r"Epoch\[1\] Validation: top1-acc=[\d.]+ \(30 images", second), second
    assert (save_dir / "resnet18_v1-0002.params").is_file() and (save_dir / "resnet18_v1-0002.states").is_file()


def logged_losses(out):
    return [float(v) for v in re.findall(r"Batch\[\d+\] loss=([0-9.]+)", out)]


def test_resnet50_hybridized_trains_at_two_ranks():
    """--hybridize is static_alloc + static_shape: the gradients the trainer
    reduces must be the ones each step's backward wrote (a stale first-step
    gradient made this loss climb to the hundreds). The logged loss is the
    epoch's running mean, so it falls only if recent losses are lower."""
    out = run_example(["--batch-size", 4, "--image-size", 32, "--num-batches", 16, "--num-epochs", 1,
                       "--log-interval", 4, "--hybridize", "--eval-frequency", 0], timeout=240)
    losses = logged_losses(out)
    assert len(losses) == 4, out
    assert losses[-1] < 0.7 * losses[0], out


def test_synthetic_validation_uses_batches_it_never_trained_on():
    import importlib.util

    import mxnet as mx

    spec = importlib.util.spec_from_file_location("imagenet_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    args = example.parse_args(["--batch-size", "4", "--image-size", "8", "--num-classes", "10"])
    data = example.SyntheticData(args, 1, mx.cpu())
    train = [x.asnumpy() for x, _ in data.train_batches(2)]
    val = [x.asnumpy() for x, _, _ in data.val_batches(3)]
    assert len(val) == 3 and all(v.shape == train[0].shape for v in val)
    assert not any(np.array_equal(v, t) for v in val for t in train)
    assert not np.array_equal(val[0], val[1])


def test_synthetic_smoke_with_options():
    out = run_example(["--model", "resnet18_v1", "--batch-size", 4, "--image-size", 32, "--num-batches", 3,
                       "--num-epochs", 2, "--num-classes", 10, "--hybridize", "--fp16-allreduce",
                       "--gradient-predivide-factor", 2, "--label-smoothing", 0.1, "--lr-mode", "cosine",
                       "--warmup-epochs", 1, "--log-interval", 1])
    assert "synthetic data" in out
    lrs = [float(x) for x in re.findall(r"Batch\[\d+\] .* lr=([\d.]+) img/s per rank=", out)]
    assert len(lrs) == 6, out
    assert 0 < lrs[0] < lrs[1] < lrs[2]  # warmup over epoch 0 ...
    assert lrs[3] > lrs[4] > lrs[5] > 0  # ... then cosine decay in epoch 1
    assert re.search(r"Epoch\[1\] Validation: top1-acc=[\d.]+ top5-acc=[\d.]+", out), out


def test_default_model_smoke_with_launcher():
    """The command the README shows first, with the default ResNet-50."""
    out = run_example(["--batch-size", 4, "--image-size", 64, "--num-batches", 6, "--num-epochs", 1],
                      launcher=[sys.executable, "-m", "mxplugin_run", "-np", "2"])
    assert "resnet50_v1 on 2 rank(s)" in out
    assert re.search(r"Epoch\[0\] Batch\[6\] .*img/s per rank=[\d.]+ total img/s=[\d.]+", out), out
    assert re.search(r"Epoch\[0\] done in .*img/s", out), out
    assert "\r" not in out  # no progress bar when output is not a terminal


def test_the_kubernetes_manifest_launches_what_the_launcher_and_the_example_accept():
    """examples/kubernetes_mpijob.yaml's launcher command (read without a YAML
    library: its quoted list items) is a valid mxplugin-run command whose
    program is this example with valid arguments; the launch path itself
    runs on fake hosts in tests/test_multi_host.py."""
    import importlib.util

    from mxplugin_run.run import parse_args

    with open(os.path.join(REPO, "examples", "kubernetes_mpijob.yaml")) as f:
        text = f.read()
    launcher = text[text.index("    Launcher:"):text.index("    Worker:")]
    assert 'command: ["mxplugin-run"]' in launcher, launcher
    args = re.findall(r'^\s+- "([^"]*)"', launcher[launcher.index("args:"):], re.M)
    parsed = parse_args(args)
    assert parsed.num_proc == 4 and parsed.hostfile == "/etc/mpi/hostfile", args
    assert parsed.command[:2] == ["python", "examples/mxnet_imagenet_resnet50.py"], parsed.command
    spec = importlib.util.spec_from_file_location("resnet50_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.parse_args(parsed.command[2:])  # exits (failing the test) on an argument it does not take
