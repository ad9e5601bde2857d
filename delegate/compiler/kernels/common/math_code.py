"""exp, tanh, the logistic function and erf as OpenCL statements of arithmetic only.

PoCL runs the OpenCL builtins exp, tanh and erf as calls on one value at a time, where its
vectoriser leaves arithmetic in vector registers: on 64K floats (2 cores of an AMD EPYC) erf took
618 us, tanh 269 us and exp 136 us against 12 us for a copy, so a swish or a GELU cost more than
the matrix product it follows. These forms cost a few multiply-adds and one division, on any
device, with the accuracy TFLite's float kernels are held to (tests/test_math_code.py):

- exp: x = n ln2 + f with n rounded to nearest (the 1.5 * 2^23 addition rounds without a call) and
  |f| <= ln2 / 2 (ln2 in two parts, so f keeps its low bits); e^f = 1 + f + f^2 q(f) with q of
  degree 4, fitted here by least squares on relative error; 2^n as the product of two powers of
  two built from their exponent bits, so that n from -150 to 128 needs no denormal or infinity
  on the way. Within 2 ulp of e^x wherever it is a normal float; below, a denormal or 0 (as the
  device keeps denormals); above 88.7228 +inf; NaN stays NaN.
- tanh(x) = sign(x) (1 - t) / (1 + t) with t = e^(-2|x|), and its series under |x| = 1/8 (where the
  quotient loses low bits): within 2e-7 of tanh (absolute), a few ulp (relative).
- logistic(x) = 1 / (1 + e^-x).
- erf(z) = z P(z^2) / Q(z^2), P and Q of degree 5, fitted here on [0, 4] (erf(4) is 1 in float32
  to 1.5e-8); |z| over 4 gives +-1: within 4e-7 of erf (absolute).

Each function returns statements in a block of their own (the temporaries' names stay inside)
that compute in float``width`` and assign the value to ``dst``, through ``store`` (a conversion
such as ``TO_FLT4``, for a FLT4 ``dst`` under half math); ``src`` is any float``width`` expression.
"""

from __future__ import annotations

#: q in e^f = 1 + f + f^2 q(f), lowest degree first
_EXP_Q = (0.49999988079071045, 0.166665181517601, 0.04166953265666962, 0.008368915878236294, 0.0013751407386735082)
#: the largest float whose e^x is finite in float32 (ln of the largest float, rounded down)
_EXP_MAX = "88.72283172607422f"
#: tanh x = x + x^3 T(x^2) for |x| under 0.125 (the series: (1 - t) / (1 + t) loses low bits there)
_TANH_SERIES = (-1.0 / 3.0, 2.0 / 15.0, -17.0 / 315.0, 62.0 / 2835.0)
#: erf(z) = z P(z^2) / Q(z^2) on |z| <= 4, lowest degree first
_ERF_P = (
    1.1283791065216064,
    0.19264565408229828,
    0.05299654230475426,
    0.0038507161661982536,
    0.00028484733775258064,
    2.0055090317327995e-06,
)
_ERF_Q = (
    1.0,
    0.5040599703788757,
    0.11499161273241043,
    0.015138131566345692,
    0.001179735641926527,
    3.763238055398688e-05,
)


def _types(width: int) -> tuple[str, str]:
    """The float type and the int type of ``width`` lanes (1: scalars)."""
    suffix = "" if width == 1 else str(width)
    return f"float{suffix}", f"int{suffix}"


def _horner(coefficients: tuple[float, ...], var: str) -> str:
    """The polynomial with ``coefficients`` (lowest degree first) in ``var``, as nested products."""
    text = f"{coefficients[-1]!r}f"
    for c in reversed(coefficients[:-1]):
        text = f"({text} * {var} + {c!r}f)"
    return text


def exp_code(dst: str, src: str, width: int = 4, store: str = "") -> str:
    """Statements setting ``dst`` to e^``src``."""
    flt, int_type = _types(width)
    const = f"({flt})"
    return (
        f"{{ {flt} ex_x = {src};\n"
        f"    {flt} ex_c = ex_x < {const}(-104.0f) ? {const}(-104.0f) : ex_x;\n"
        f"    ex_c = ex_c > {const}({_EXP_MAX}) ? {const}({_EXP_MAX}) : ex_c;\n"
        f"    {flt} ex_n = (ex_c * 1.44269504f + 12582912.0f) - 12582912.0f;\n"
        f"    {flt} ex_f = (ex_c - ex_n * 0.693145751953125f) - ex_n * 1.428606765330187e-06f;\n"
        f"    {flt} ex_p = 1.0f + ex_f + ex_f * ex_f * {_horner(_EXP_Q, 'ex_f')};\n"
        f"    {int_type} ex_i = convert_{int_type}(ex_n), ex_h = ex_i >> 1;\n"
        f"    ex_p = ex_p * as_{flt}((ex_h + 127) << 23) * as_{flt}((ex_i - ex_h + 127) << 23);\n"
        f"    {dst} = {store}(ex_x > {const}({_EXP_MAX}) ? {const}(INFINITY) : ex_p); }}"
    )


def tanh_code(dst: str, src: str, width: int = 4, store: str = "") -> str:
    """Statements setting ``dst`` to tanh(``src``)."""
    flt, _ = _types(width)
    zero = f"({flt})(0.0f)"
    return (
        f"{{ {flt} th_x = {src};\n"
        f"    {flt} th_t;\n"
        f"    {exp_code('th_t', f'(th_x < {zero} ? th_x : -th_x) * 2.0f', width)}\n"
        f"    {flt} th_a = th_x < {zero} ? -th_x : th_x;\n"
        f"    {flt} th_u = th_a * th_a;\n"
        f"    {flt} th_r = th_a < ({flt})(0.125f) ? th_a + th_a * th_u * {_horner(_TANH_SERIES, 'th_u')}"
        " : (1.0f - th_t) / (1.0f + th_t);\n"
        f"    {dst} = {store}(th_x < {zero} ? -th_r : th_r); }}"
    )


def logistic_code(dst: str, src: str, width: int = 4, store: str = "") -> str:
    """Statements setting ``dst`` to 1 / (1 + e^-``src``)."""
    flt, _ = _types(width)
    return f"{{ {flt} lg_e;\n    {exp_code('lg_e', f'-({src})', width)}\n    {dst} = {store}(1.0f / (1.0f + lg_e)); }}"


def erf_code(dst: str, src: str, width: int = 4, store: str = "") -> str:
    """Statements setting ``dst`` to erf(``src``)."""
    flt, _ = _types(width)
    zero, four = f"({flt})(0.0f)", f"({flt})(4.0f)"
    return (
        f"{{ {flt} ef_z = {src};\n"
        f"    {flt} ef_a = ef_z < {zero} ? -ef_z : ef_z;\n"
        f"    ef_a = ef_a > {four} ? {four} : ef_a;\n"
        f"    {flt} ef_u = ef_a * ef_a;\n"
        f"    {flt} ef_r = ef_a * {_horner(_ERF_P, 'ef_u')} / {_horner(_ERF_Q, 'ef_u')};\n"
        f"    ef_r = ef_r > ({flt})(1.0f) ? ({flt})(1.0f) : ef_r;\n"
        f"    {dst} = {store}(ef_z < {zero} ? -ef_r : ef_r); }}"
    )
