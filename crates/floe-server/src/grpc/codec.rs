//! The gRPC codec: prost's, except that a message that does not parse is `INVALID_ARGUMENT`.
//!
//! `tonic_prost::ProstCodec` answers a malformed message `INTERNAL` (gRPC's status-code guide
//! files parse errors there), which tells a client the server is broken when the client sent
//! the garbage. The generated service and client use this codec (`codec_path` in build.rs), so
//! a reply the client cannot parse is `INVALID_ARGUMENT` on its side too.

use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::{Code, Status};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// [`ProstCodec`] whose decoder answers [`Code::InvalidArgument`] for a malformed message.
#[derive(Debug, Clone)]
pub(crate) struct MessageCodec<T, U>(ProstCodec<T, U>);

impl<T, U> Default for MessageCodec<T, U> {
    fn default() -> Self {
        MessageCodec(ProstCodec::default())
    }
}

impl<T, U> Codec for MessageCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = MessageDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        MessageDecoder(self.0.decoder())
    }
}

/// [`ProstDecoder`], with a parse error as [`Code::InvalidArgument`].
#[derive(Debug, Clone)]
pub(crate) struct MessageDecoder<U>(ProstDecoder<U>);

impl<U: prost::Message + Default> Decoder for MessageDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|s| {
            if s.code() == Code::Internal {
                // prost's words name the message and field, never the bytes received.
                Status::invalid_argument(format!(
                    "malformed message: {}",
                    crate::echo(s.message(), crate::MAX_DETAIL)
                ))
            } else {
                s
            }
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
