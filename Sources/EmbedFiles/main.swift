import Foundation

// Writes text files into a Swift file as string constants, byte for byte: what the `EmbedPage`
// build plugin runs so the call page's HTML and JavaScript stay files of their own (read,
// linted and opened in a browser as they are) while the node still carries them inside its
// binary, with nothing to install beside it.
//
//     EmbedFiles OUTPUT TYPE FILE...
//
// Each FILE becomes `static let` on `enum TYPE`, named from its file name: `call.html` is
// `callHTML`, `call.js` is `callJS`.

/// `call.html` → `callHTML`, `voice-page.js` → `voicePageJS`.
func propertyName(forFileNamed name: String) -> String {
    let url = URL(fileURLWithPath: name)
    let words = url.deletingPathExtension().lastPathComponent.split { !$0.isLetter && !$0.isNumber }.map(String.init)
    guard let first = words.first else { return "file" + url.pathExtension.uppercased() }
    return first.lowercased() + words.dropFirst().map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined() + url.pathExtension.uppercased()
}

/// `text` as a raw multi-line string literal whose value is exactly `text`: its delimiter has
/// one `#` more than the longest run of them in the text, so nothing in it ends the literal or
/// interpolates.
func literal(_ text: String) -> String {
    var longest = 0, run = 0
    for character in text {
        run = character == "#" ? run + 1 : 0
        longest = max(longest, run)
    }
    let hashes = String(repeating: "#", count: longest + 1)
    // The line break before the closing delimiter is not part of the value.
    return "\(hashes)\"\"\"\n\(text)\n\"\"\"\(hashes)"
}

let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count >= 2 else {
    FileHandle.standardError.write(Data("usage: EmbedFiles OUTPUT TYPE FILE...\n".utf8))
    exit(2)
}
let (output, type, files) = (arguments[0], arguments[1], arguments.dropFirst(2))
var swift = "// Made at build time from \(files.map { URL(fileURLWithPath: $0).lastPathComponent }.joined(separator: ", ")): edit those files.\n\n"
swift += "enum \(type) {\n"
for file in files {
    let text: String
    do {
        text = try String(contentsOfFile: file, encoding: .utf8)
    } catch {
        FileHandle.standardError.write(Data("EmbedFiles: cannot read \(file): \(error)\n".utf8))
        exit(1)
    }
    swift += "    static let \(propertyName(forFileNamed: file)) = \(literal(text))\n"
}
swift += "}\n"
do {
    try swift.write(toFile: output, atomically: true, encoding: .utf8)
} catch {
    FileHandle.standardError.write(Data("EmbedFiles: cannot write \(output): \(error)\n".utf8))
    exit(1)
}
