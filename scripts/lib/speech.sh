# Shared by the speech measurements (sourced, not run): the tools they need and the speech they
# send, so every script scores the same sentences the same way.

# Installs espeak-ng and sox (apt) and the pesq Python package when missing. Returns 1 when
# pesq could not be had (a script may then fall back to figures without it); ends the script
# when espeak-ng or sox could not be (called as `speech_tools || …`, `set -e` does not hold
# inside it, so the check is its own).
speech_tools() {
  local need=() pkg
  for pkg in espeak-ng sox; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "$(basename "$0"): installing ${need[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || true
  fi
  command -v espeak-ng >/dev/null && command -v sox >/dev/null ||
    { echo "$(basename "$0"): espeak-ng and sox are needed and could not be installed (apt-get install espeak-ng sox)" >&2; exit 1; }
  python3 -c 'import pesq' 2>/dev/null || pip install -q pesq >/dev/null 2>&1 || true
  python3 -c 'import pesq' 2>/dev/null
}

# Six Harvard sentences spoken by espeak-ng into DIR: speech.wav as made, speech48.wav (48 kHz
# mono, what a call sends) and ref16.wav (16 kHz mono, PESQ-WB's reference).
speech_make() {
  local dir=$1
  local text="The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background. \
It is easy to tell the depth of a well. These days a chicken leg is a rare dish. \
Rice is often served in round bowls. The juice of lemons makes fine punch."
  espeak-ng -v en-us -s 150 -w "$dir/speech.wav" "$text"
  sox -D "$dir/speech.wav" -r 48000 -c 1 -b 16 "$dir/speech48.wav"
  sox -D "$dir/speech.wav" -r 16000 -c 1 -b 16 "$dir/ref16.wav"
}
