import CallNode
import Testing

/// The names of a node's audio devices are specs that parse back to the same device: the audio
/// session opens a fallback by its name, so a name that did not parse opened the primary device
/// again (a 1 100 Hz tone was named `tone:1,100`).
@Suite struct NodeAudioSpecTests {
    @Test(arguments: [NodeAudioInput.tone(440), .tone(1_100), .tone(1_100.5), .tone(23_999), .silence, .wav("/tmp/a.wav"), .alsa("hw:0")])
    func anInputsNameParsesBackToIt(input: NodeAudioInput) {
        #expect(NodeAudioInput(spec: input.description) == input, "\(input.description)")
    }
}
