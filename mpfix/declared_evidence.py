"""What a project's declarations say, once read: the requirements found, and what they decide.

``Evidence`` collects the TensorFlow/Keras requirements of one folder (``mpfix.declared`` reads the
files); ``decide`` turns them into a Keras target, ``newest_tf``/``oldest_tf`` into the TensorFlow
versions they allow. ``packaging.specifiers`` decides whether the versions the requirements allow are
all below 2.16 (Keras 2) or all from 2.16 on (Keras 3); conflicting or open requirements decide nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mpfix.project.kinds import KERAS2, KERAS3, Target

TF_NAMES = frozenset({"tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos", "tensorflow-intel",
                      "tensorflow-aarch64", "tensorflow-rocm", "intel-tensorflow", "tf-nightly", "tf-nightly-cpu",
                      "tf-nightly-gpu"})

def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Unreadable:
    """A declaration mpfix cannot read that may name TensorFlow or Keras: the Keras target is then
    unknown, never guessed from the installed TensorFlow."""

    where: str  # the file, relative to the project root
    text: str  # the expression as written (``f"tensorflow>={MIN_TF},<{MAX_TF}"``)

    def describe(self) -> str:
        return f"{self.where}: {self.text}"


@dataclass
class Evidence:
    """Requirements found in one folder."""

    tf_specs: list[tuple[str, str, str]] = field(default_factory=list)  # (specifier, where, distribution)
    keras_specs: list[tuple[str, str]] = field(default_factory=list)
    tf_keras: list[str] = field(default_factory=list)  # where a required tf-keras was declared
    legacy_env: list[str] = field(default_factory=list)  # where TF_USE_LEGACY_KERAS=1 is set (a Dockerfile's ENV)
    images: list[tuple[int, str]] = field(default_factory=list)  # (generation, where)
    # (newest TensorFlow (major, minor) the image ships, where): NGC/merlin/tensorflow images with a known TF
    image_tf: list[tuple[tuple[int, int], str]] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)  # requirements that cannot be read
    image_tf_min: list[tuple[tuple[int, int], str]] = field(default_factory=list)  # oldest TF an image pins

    def empty(self) -> bool:
        return not (self.tf_specs or self.keras_specs or self.tf_keras or self.legacy_env or self.images
                    or self.unreadable)

    def add_requirement(self, text: str, where: str, optional: bool = False) -> None:
        requirement = _requirement(text)
        if requirement is None:
            return
        name, spec = requirement
        if name in TF_NAMES:
            self.tf_specs.append((spec, where, name))
        elif name == "keras":
            self.keras_specs.append((spec, where))
        elif name == "tf-keras" and not optional:
            self.tf_keras.append(where)


def _requirement(text: str) -> tuple[str, str] | None:
    """(canonical name, specifier) of a PEP 508 requirement line; None for anything else."""
    text = text.split(" #", 1)[0].split(";", 1)[0].strip()
    if not text or text.startswith(("#", "-", "git+", "http:", "https:", "file:", ".")):
        return None
    match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(\(?)(.*?)\)?\s*$", text)
    if match is None:
        return None
    name, spec = _canonical(match.group(1)), match.group(4).strip()
    if spec.startswith("@"):
        return name, ""
    return name, spec


# -- deciding ---------------------------------------------------------------------------------

def _candidates(specs: list[str]) -> list:
    from packaging.version import InvalidVersion, Version

    found = set()
    for major in (1, 2, 3):
        for minor in range(0, 41):
            for micro in (0, 1, 99):
                found.add(Version(f"{major}.{minor}.{micro}"))
    for spec in specs:
        for raw in re.findall(r"\d+(?:\.\d+)*", spec):
            parts = [int(p) for p in raw.split(".")]
            for i in range(len(parts)):
                for delta in (-1, 0, 1):
                    bumped = parts[: i + 1]
                    bumped[i] = max(0, bumped[i] + delta)
                    try:
                        found.add(Version(".".join(map(str, bumped))))
                    except InvalidVersion:
                        pass
    return sorted(found)


def allowed_generations(specs: list[str], boundary: str) -> set[int] | None:
    """{2}, {3} or {2, 3}: the generations the versions allowed by all ``specs`` fall into.

    Versions below ``boundary`` count as Keras 2 (TensorFlow: 2.16; Keras itself: 3).
    None when the specifiers cannot be read or allow nothing.
    """
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version

    combined = SpecifierSet()
    for spec in specs:
        try:
            combined &= SpecifierSet(_poetry(spec))
        except InvalidSpecifier:
            return None
    limit = Version(boundary)
    allowed = [v for v in _candidates(specs) if combined.contains(v, prereleases=False)]
    if not allowed:
        return None
    return {KERAS2 if v < limit else KERAS3 for v in allowed}


def _poetry(spec: str) -> str:
    """Poetry/Pipfile/conda spellings as PEP 440 specifiers (``^2.15``, ``~2.15``, ``2.15.*``, ``*``)."""
    spec = spec.strip()
    if spec in ("", "*"):
        return ""
    out = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        caret = re.fullmatch(r"\^\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?", part)
        tilde = re.fullmatch(r"~\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?", part)
        if caret:
            major, minor, micro = (int(x) if x is not None else None for x in caret.groups())
            low = ".".join(str(x) for x in (major, minor, micro) if x is not None)
            if major > 0:
                high = f"{major + 1}"
            elif minor:
                high = f"0.{minor + 1}"
            else:
                high = f"0.0.{(micro or 0) + 1}"
            out += [f">={low}", f"<{high}"]
        elif tilde:
            major, minor, micro = (int(x) if x is not None else None for x in tilde.groups())
            low = ".".join(str(x) for x in (major, minor, micro) if x is not None)
            high = f"{major}.{minor + 1}" if minor is not None else f"{major + 1}"
            out += [f">={low}", f"<{high}"]
        elif re.fullmatch(r"\d[\w.*+!-]*", part):
            out.append(f"=={part}")  # a bare version (Poetry, conda): exactly that, wildcards allowed
        else:
            out.append(part)
    return ",".join(out)


def decide(evidence: Evidence) -> Target | None:
    votes: list[tuple[str, int, str]] = []  # (kind, generation, why)
    if evidence.tf_specs:
        specs = [s for s, _, _ in evidence.tf_specs]
        where = ", ".join(sorted({f"{w}: {n}{s}" if s and s[0] in "<>=!~" else f"{w}: {n} {s}".rstrip()
                                  for s, w, n in evidence.tf_specs}))
        generations = allowed_generations(specs, "2.16")
        if generations is not None and len(generations) == 1:
            (generation,) = generations
            side = "< 2.16" if generation == KERAS2 else ">= 2.16"
            votes.append(("tensorflow", generation, f"{where} allows only TensorFlow {side}"))
    if evidence.keras_specs:
        generations = allowed_generations([s for s, _ in evidence.keras_specs], "3")
        if generations is not None and len(generations) == 1:
            (generation,) = generations
            where = ", ".join(sorted({f"{w}: keras{s}" for s, w in evidence.keras_specs}))
            votes.append(("keras", generation, f"{where} allows only Keras {generation}"))
    for where in evidence.tf_keras:
        votes.append(("legacy", KERAS2, f"{where}: requires tf-keras (Keras 2)"))
    for where in evidence.legacy_env:
        votes.append(("legacy", KERAS2, f"{where}: sets TF_USE_LEGACY_KERAS=1"))
    for generation, where in evidence.images:
        votes.append(("tensorflow", generation, where))
    if not votes:
        return None
    generations = {g for _, g, _ in votes}
    if generations == {KERAS2, KERAS3}:
        # tf-keras (or TF_USE_LEGACY_KERAS=1) next to TensorFlow >= 2.16 is the legacy-Keras setup; a
        # `keras>=3` requirement against it is a real conflict, which decides nothing.
        legacy = [why for kind, _, why in votes if kind == "legacy"]
        if legacy and all(kind == "tensorflow" for kind, g, _ in votes if g == KERAS3):
            return Target(KERAS2, "declared: " + "; ".join(why for _, g, why in votes if g == KERAS2))
        return None
    (generation,) = generations
    return Target(generation, "declared: " + "; ".join(why for _, _, why in votes))


def oldest_tf(evidence: Evidence) -> tuple[int, int] | None:
    """The oldest TensorFlow (major, minor) ``evidence`` allows; None when open below or not declared.

    A requirement without a lower bound (``tensorflow<2.16``) is open below; an image tag pins its version.
    """
    if evidence.tf_specs:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import Version

        specs = [s for s, _, _ in evidence.tf_specs]
        combined = SpecifierSet()
        try:
            for spec in specs:
                combined &= SpecifierSet(_poetry(spec))
        except InvalidSpecifier:
            return None
        allowed = [v for v in _candidates(specs) if combined.contains(v, prereleases=False)]
        if not allowed or allowed[0] <= Version("1.0.0"):
            return None  # nothing, or open below (the candidates start at 1.0.0)
        return allowed[0].major, allowed[0].minor
    if evidence.image_tf_min:
        return min(oldest for oldest, _ in evidence.image_tf_min)
    return None


def newest_tf(evidence: Evidence) -> tuple[tuple[int, int], str] | None:
    """The newest TensorFlow (major, minor) ``evidence`` allows, and why; None when open or not declared.

    Requirements (``tensorflow==2.8.*``, ``tensorflow<2.9``) are what pip installs and decide when
    present; otherwise the base image's TensorFlow does.
    """
    if evidence.tf_specs:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        specs = [s for s, _, _ in evidence.tf_specs]
        combined = SpecifierSet()
        try:
            for spec in specs:
                combined &= SpecifierSet(_poetry(spec))
        except InvalidSpecifier:
            return None
        allowed = [v for v in _candidates(specs) if combined.contains(v, prereleases=False)]
        if not allowed or allowed[-1].major >= 3 or allowed[-1].minor >= 40:
            return None  # nothing, or open upwards (the candidates end at 3.x / x.40)
        where = ", ".join(sorted({f"{w}: {n}{s}" for s, w, n in evidence.tf_specs}))
        return (allowed[-1].major, allowed[-1].minor), where
    if evidence.image_tf:
        newest, where = max(evidence.image_tf)
        return newest, where
    return None
